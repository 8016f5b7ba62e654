"""box.key (connectd.federation.keys): made once, 0600, durably; read back; never replaced; a bad file
is a loud error naming the problem."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from connectd.federation import keys as K


def test_create_writes_a_0600_file_that_reads_back_the_same_secrets(tmp_path: Path) -> None:
    made = K.create(tmp_path)
    path = tmp_path / K.BOX_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert K.read(tmp_path) == made
    row = json.loads(path.read_bytes())
    assert set(row) == {"v", "sign_seed", "seal_secret"} and row["v"] == 1
    assert made.sign_seed != made.seal_secret  # two independent secrets
    assert [p.name for p in tmp_path.iterdir()] == [K.BOX_KEY_FILE]  # no temporary file left
    assert "hidden" in repr(made) and made.sign_seed.hex() not in repr(made)


def test_create_never_replaces_existing_keys(tmp_path: Path) -> None:
    first = K.create(tmp_path)
    before = (tmp_path / K.BOX_KEY_FILE).read_bytes()
    with pytest.raises(K.BoxKeyError, match="never replaced"):
        K.create(tmp_path)
    assert (tmp_path / K.BOX_KEY_FILE).read_bytes() == before
    assert K.read(tmp_path) == first


def test_create_refuses_a_symlink_in_the_key_s_place(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    (tmp_path / K.BOX_KEY_FILE).symlink_to(target)
    with pytest.raises(K.BoxKeyError, match="exists"):
        K.create(tmp_path)
    assert not target.exists()


def test_read_refuses_a_missing_file_naming_the_command(tmp_path: Path) -> None:
    with pytest.raises(K.BoxKeyError, match="federate init"):
        K.read(tmp_path)


def test_read_refuses_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_bytes(K.BoxSecrets(bytes(32), bytes(32)).encode())
    (tmp_path / K.BOX_KEY_FILE).symlink_to(real)
    with pytest.raises(K.BoxKeyError, match="regular file"):
        K.read(tmp_path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b'{"v": 2, "sign_seed": "", "seal_secret": ""}', "version 1"),
        (b'{"v": 1, "sign_seed": "AAAA", "seal_secret": "AAAA"}', "malformed key"),
        (b'{"v": 1, "sign_seed": 5, "seal_secret": "AAAA"}', "malformed key"),
        (b'{"v": 1, "sign_seed": "AA", "seal_secret": "AA", "x": 1}', "version 1"),
    ],
)
def test_read_refuses_a_garbled_file_naming_it(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / K.BOX_KEY_FILE
    path.write_bytes(content)
    os.chmod(path, 0o600)
    with pytest.raises(K.BoxKeyError, match=problem) as caught:
        K.read(tmp_path)
    assert str(path) in str(caught.value)


def test_a_key_readable_by_others_is_tightened_to_0600(tmp_path: Path) -> None:
    made = K.create(tmp_path)
    path = tmp_path / K.BOX_KEY_FILE
    os.chmod(path, 0o644)
    assert K.read(tmp_path) == made
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_init_makes_the_keys_and_names_the_box_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "dd"
    made = K.init(data_dir, "laptop")
    assert K.read(data_dir) == made
    assert (data_dir / K.FEDERATION_FILE).read_text() == 'name = "laptop"\n'
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    with pytest.raises(K.BoxKeyError, match="set up for federation already"):
        K.init(data_dir, "other")
    assert K.read(data_dir) == made and "laptop" in (data_dir / K.FEDERATION_FILE).read_text()


def test_init_keeps_keys_it_finds_and_checks_the_name_before_touching_anything(tmp_path: Path) -> None:
    from connectcore.federation.boxes import BoxError

    with pytest.raises(BoxError, match="box name"):
        K.init(tmp_path, "Not A Name")
    assert list(tmp_path.iterdir()) == []
    first = K.create(tmp_path)
    assert K.init(tmp_path, "laptop") == first


def test_federate_init_prints_the_box_id_and_fingerprint_and_refuses_a_second_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from connectcore.federation.boxes import BoxKeys
    from connectd.cli import main as cli
    from connectd.federation.seal import LocalBox

    assert cli.main(["--data-dir", str(tmp_path), "federate", "init", "--name", "laptop", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    local = LocalBox.from_secrets(K.read(tmp_path))
    keys = BoxKeys(bytes(local.signing.verify_key), bytes(local.sealing.public_key))
    assert shown == {"name": "laptop", "box": keys.box_id, "fingerprint": keys.fingerprint}
    with pytest.raises(SystemExit, match="set up for federation already"):
        cli.main(["--data-dir", str(tmp_path), "federate", "init", "--name", "laptop"])
