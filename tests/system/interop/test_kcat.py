"""kcat (librdkafka's command-line client) produces idempotently and consumes, every codec."""

import shutil
import subprocess

import pytest

from exactly.testing import EmbeddedBroker
from tests.support import CODECS, create_topic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def shared_broker():
    with EmbeddedBroker() as broker:
        yield broker


def test_kcat_is_installed():
    # .ci/run installs Debian's kcat; without it this module would check nothing.
    assert KCAT, "kcat is not installed (apt-get install kcat)"


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_round_trip(shared_broker, codec):
    assert KCAT
    topic = f"kcat-{codec}"
    create_topic(shared_broker.bootstrap, topic, partitions=1)
    lines = [f"line-{i}" for i in range(500)]
    subprocess.run(
        [KCAT, "-b", shared_broker.bootstrap, "-P", "-t", topic, "-z", codec,
         "-X", "enable.idempotence=true", "-X", "acks=all"],
        input="\n".join(lines) + "\n", text=True, check=True, timeout=60,
    )
    out = subprocess.run(
        [KCAT, "-b", shared_broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
         "-f", "%o %s\\n"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.splitlines()
    assert out == [f"{i} line-{i}" for i in range(500)]

    listing = subprocess.run([KCAT, "-b", shared_broker.bootstrap, "-L", "-t", topic],
                             capture_output=True, text=True, check=True, timeout=30).stdout
    assert f'topic "{topic}" with 1 partitions' in listing
