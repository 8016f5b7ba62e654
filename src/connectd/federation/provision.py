"""What the NATS operator sets up for the boxes (docs/federation.md, "Subjects, stream, consumers,
bucket" and "Permissions for box X"): the stream ``CONNECT``, the bucket ``connect_dir`` (direct get on,
republished to ``connect.<reader>.directory.<publisher>``), a box's durable pull consumer, and the
permission block a box's user gets. Run with the operator's (admin) connection; idempotent. Boxes create
none of these. (``connectd federate provision``, the command, comes with a later slice; the tests'
fixture uses these today.)"""

from __future__ import annotations

from typing import Any

from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    RePublish,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from connectd.federation.bus import BUCKET, STREAM, consumer_name

ENVELOPE_BYTES = 64 * 1024
STREAM_SUBJECTS = ["connect.*.inbox.*", "connect.*.receipts.*", "connect.*.cancel.*", "connect.*.pairing.*"]


async def provision_stream(js: JetStreamContext, *, per_subject: int = 1000, replicas: int = 1) -> None:
    """The stream ``CONNECT`` and the bucket ``connect_dir``, created if missing."""
    streams = {
        STREAM: StreamConfig(
            name=STREAM, subjects=STREAM_SUBJECTS, retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE, duplicate_window=120.0, max_age=7200.0,
            max_msgs_per_subject=per_subject, discard=DiscardPolicy.NEW, discard_new_per_subject=True,
            max_msg_size=ENVELOPE_BYTES, num_replicas=replicas,
        ),
        f"KV_{BUCKET}": StreamConfig(
            name=f"KV_{BUCKET}", subjects=[f"$KV.{BUCKET}.>"], max_msgs_per_subject=1,
            discard=DiscardPolicy.NEW, storage=StorageType.FILE, allow_direct=True, allow_rollup_hdrs=True,
            deny_delete=True, max_msg_size=ENVELOPE_BYTES, num_replicas=replicas,
            republish=RePublish(src=f"$KV.{BUCKET}.*.*", dest="connect.{{wildcard(2)}}.directory.{{wildcard(1)}}"),
        ),
    }
    for name, config in streams.items():
        try:
            await js.stream_info(name)
        except NotFoundError:
            await js.add_stream(config)


async def provision_box(js: JetStreamContext, box_id: str, *, ack_wait: float = 30.0) -> None:
    """Box ``box_id``'s durable pull consumer ``box-<id>`` on ``connect.<id>.>``, created if missing."""
    name = consumer_name(box_id)
    try:
        await js.consumer_info(STREAM, name)
    except NotFoundError:
        await js.add_consumer(
            STREAM,
            ConsumerConfig(
                durable_name=name, filter_subject=f"connect.{box_id}.>", ack_policy=AckPolicy.EXPLICIT,
                ack_wait=ack_wait, max_deliver=-1, max_ack_pending=256,
            ),
        )


def permissions(box_id: str) -> dict[str, Any]:
    """Box ``box_id``'s permission block, exactly as docs/federation.md gives it."""
    x, consumer = box_id, consumer_name(box_id)
    return {
        "publish": {
            "allow": [
                f"connect.*.inbox.{x}", f"connect.*.receipts.{x}", f"connect.*.cancel.{x}", f"connect.*.pairing.{x}",
                "connect.*.history",
                f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{consumer}",
                f"$JS.API.CONSUMER.INFO.{STREAM}.{consumer}",
                f"$JS.ACK.{STREAM}.{consumer}.>",
                f"$KV.{BUCKET}.{x}.*",
                f"$JS.API.DIRECT.GET.KV_{BUCKET}.$KV.{BUCKET}.*.{x}",
            ]
        },
        "subscribe": {"allow": [f"_INBOX.{x}.>", f"connect.{x}.history", f"connect.{x}.directory.*"]},
        "allow_responses": {"max": 1, "expires": "10s"},
    }
