"""Issue 21 item 1, the same class for the other binding sources: a Claude Code session registry file
(``<root>/sessions/<pid>.json``, which any process of the user can write for its own pid) naming the
running control agent's session, or after control's pane closed, gives the pane that forged it no grant
and no join into control's principal; so does an OpenCode server answer naming it. Real daemon, real tmux,
stand-in agents; the rule is connectcore.grants.binding_refusal (tests/unit/test_grants_edges.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.integration.test_directory_routing import _demo_child, _register, daemon, roots  # noqa: F401 - fixtures
from tests.support.daemon import DaemonProcess, wait_for
from tests.support.tmux_server import TmuxServer

CONTROL_SESSION = "7e1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c70"
OWN = ("7e1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c71", "7e1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c72")


def _hand_started_observer(daemon: DaemonProcess, tmux: TmuxServer, claude_root: Path, own: str) -> tuple[str, int]:  # noqa: F811
    """A Claude stand-in typed into a shell by hand, bound to its own session ``own`` by its registry
    file, then given Observe by the person."""
    pane = tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(daemon.workdir)).strip()
    shell_pid = int(tmux.tmux("display-message", "-p", "-t", pane, "#{pane_pid}").strip())
    tmux.tmux("send-keys", "-t", pane, "-l", str(daemon.tmp / "bin" / "claude"))
    tmux.tmux("send-keys", "-t", pane, "Enter")
    pid = wait_for(lambda: _demo_child(shell_pid), 10, "the typed agent's process")
    wait_for(lambda: daemon.agent_view(pane).get("harness") == "claude", 10, "the typed agent read")
    _register(claude_root, pid, own, str(daemon.workdir))
    wait_for(lambda: daemon.agent_view(pane).get("session"), 15, "its own registry binding")
    daemon.api("POST", f"/api/panes/{pane}/connect", {"preset": "observe"})
    view = daemon.agent_view(pane)
    assert view["scopes"] == ["history", "read"] and view["actor"] == f"agent:claude:{own}", view
    return pane, pid


def _assert_no_grant_raised(daemon: DaemonProcess, pane: str, ctl_pane: str | None) -> None:  # noqa: F811
    time.sleep(3.0)  # several bind rounds
    view = daemon.agent_view(pane)
    assert view["scopes"] == ["history", "read"] and not view["control"], view
    assert CONTROL_SESSION not in (view["actor"] or ""), view
    assert daemon.api("GET", "/api/acts?all=1") == [] and daemon.api("GET", "/api/cards") == []
    if ctl_pane is not None:
        ctl = daemon.agent_view(ctl_pane)
        assert ctl["control"] and "act" in ctl["scopes"] and ctl["actor"] == f"agent:claude:{CONTROL_SESSION}", ctl
    assert "Traceback" not in daemon.log_text()


def test_a_forged_registry_file_naming_control_s_session_raises_no_grant(
    daemon: DaemonProcess, tmux: TmuxServer, roots: tuple[Path, Path]  # noqa: F811
) -> None:
    ctl = daemon.launch("ctl", "off", control=True, session=CONTROL_SESSION)
    daemon.wait_ready(ctl)
    assert daemon.agent_view(ctl.pane)["actor"] == f"agent:claude:{CONTROL_SESSION}"

    pane, pid = _hand_started_observer(daemon, tmux, roots[0], OWN[0])  # while control runs, it rewrites
    # its registry file to name control's session
    _register(roots[0], pid, CONTROL_SESSION, str(daemon.workdir))
    _assert_no_grant_raised(daemon, pane, ctl.pane)

    tmux.tmux("kill-pane", "-t", ctl.pane)  # after control's pane closed
    wait_for(lambda: daemon.agent_view(ctl.pane)["activity"] == "gone", 15, "control's pane gone")
    later, later_pid = _hand_started_observer(daemon, tmux, roots[0], OWN[1])
    _register(roots[0], later_pid, CONTROL_SESSION, str(daemon.workdir))
    _assert_no_grant_raised(daemon, later, None)
    _assert_no_grant_raised(daemon, pane, None)


def _agent_pid(tmux: TmuxServer, pane: str) -> int:
    pane_pid = int(tmux.tmux("display-message", "-p", "-t", pane, "#{pane_pid}").strip())
    return wait_for(lambda: _demo_child(pane_pid) or (pane_pid if _is_demo(pane_pid) else None), 10, "the agent's pid")


def _is_demo(pid: int) -> bool:
    from connectd.tmux import procfs

    return any(a.endswith("demo_agent.py") for a in procfs.cmdline(pid) or [])


def test_a_launched_observe_agent_s_first_binding_naming_control_s_session_raises_no_grant(
    daemon: DaemonProcess, tmux: TmuxServer, roots: tuple[Path, Path]  # noqa: F811
) -> None:
    """A launched Observe agent (its session fixed at launch) forges its registry record to name control's
    session: it keeps its own session, principal and Observe; control keeps its own."""
    ctl = daemon.launch("ctl", "off", control=True, session=CONTROL_SESSION)
    daemon.wait_ready(ctl)
    obs = daemon.launch("obs", "observe")
    daemon.wait_ready(obs)
    before = daemon.agent_view(obs.pane)
    assert before["scopes"] == ["history", "read"], before
    _register(roots[0], _agent_pid(tmux, obs.pane), CONTROL_SESSION, str(daemon.workdir))
    _assert_no_grant_raised(daemon, obs.pane, ctl.pane)
    assert daemon.agent_view(obs.pane)["actor"] == before["actor"]  # still its own launch's session


def test_an_opencode_server_answering_control_s_session_raises_no_grant(tmp_path: Path) -> None:
    """An Observe OpenCode launch whose own server answers with the session id of the running control
    agent (an OpenCode launch too, bound to it), and again after control's pane closed: the Observe
    token keeps Observe and never joins control's principal; control keeps its own."""
    import anyio

    from tests.integration.test_opencode_launch import ROOT as OC_ROOT
    from tests.support.daemon import call, mcp_agent
    from tests.support.fake_opencode_server import SESSION_ID, install_wrapper

    with TmuxServer("connect-oc-attack") as tmux:
        tmux.new_session("main", width=80, height=24)
        d = DaemonProcess(tmp_path, tmux)
        wrapper = install_wrapper(tmp_path / "oc-bin", OC_ROOT)
        with (d.data_dir / "launchers.toml").open("a") as f:
            f.write(f'[launchers.oc]\nharness = "opencode"\nargv = [{json.dumps(str(wrapper))}]\n')
        d.start()
        try:
            def launched(connect: str, name: str, **extra: object) -> dict[str, object]:
                env = {"FAKE_OPENCODE_LOG": str(tmp_path / f"oc-{name}.jsonl"), "DEMO_AGENT_REVEAL_TOKEN": "1"}
                body = {"launcher": "oc", "connect": connect, "cwd": str(d.workdir), "env": env, **extra}
                return d.api("POST", "/api/launch", body)  # type: ignore[no-any-return]

            ctl = launched("off", "ctl", control=True)
            ctl_pane = str(ctl["pane"])
            wait_for(lambda: d.agent_view(ctl_pane)["actor"] == f"agent:opencode:{SESSION_ID}", 30, "control bound")
            assert d.agent_view(ctl_pane)["control"]

            def attacked(name: str, control_pane: str | None) -> str:
                pane = str(launched("observe", name)["pane"])
                wait_for(lambda: any(r["action"] == "opencode.bind" and r["target"] == pane
                                     for r in d.api("GET", "/api/audit?limit=500")), 30, "the bind answered")
                time.sleep(3.0)  # bind rounds
                view = d.agent_view(pane)
                assert view["scopes"] == ["history", "read"] and not view["control"], view
                assert view["actor"] != f"agent:opencode:{SESSION_ID}", view
                token = _env_token(tmux.pane_pid(pane))

                async def as_agent() -> tuple[set[str], dict[str, object], tuple[bool, object]]:
                    async with mcp_agent(d.mcp_url, token) as client:
                        tools = {t.name for t in (await client.list_tools()).tools}
                        err, me = await call(client, "whoami")
                        assert not err, me
                        return tools, me, await call(client, "launch_agent", launcher="oc", cwd=str(d.workdir))

                tools, me, (err, text) = anyio.run(as_agent)
                assert me["scopes"] == ["history", "read"] and "launch_agent" not in tools, (me, tools)
                assert err and "act" in str(text), text
                assert d.api("GET", "/api/acts?all=1") == []
                if control_pane is not None:
                    ctl_view = d.agent_view(control_pane)
                    assert ctl_view["control"] and ctl_view["actor"] == f"agent:opencode:{SESSION_ID}", ctl_view
                return pane

            first = attacked("obs-a", ctl_pane)
            for pane in (ctl_pane, first):  # nobody else claims the session any more: only the rule refuses
                tmux.tmux("kill-pane", "-t", pane)
                wait_for(lambda p=pane: d.agent_view(p)["activity"] == "gone", 15, "the pane gone")
            attacked("obs-b", None)
            assert "Traceback" not in d.log_text()
        finally:
            d.stop()


def _env_token(pid: int) -> str:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)["CONNECT_TOKEN"]
