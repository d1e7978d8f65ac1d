"""Fixtures the repair tests share: a FalkorDB server of the test's own, to stop and start again."""
import shutil
import tempfile
from pathlib import Path

import pytest
import redis
from django.test import override_settings

from core import embedded
from tests.helpers import free_port


@pytest.fixture
def own_falkordb():
    data = Path(tempfile.mkdtemp(prefix="kintsugi-own-"))
    port = free_port()
    server = {"proc": embedded.start_redis_server(data_dir=data, port=port, with_graph=True)}

    def stop():
        redis.Redis.from_url(embedded.server_url(port)).shutdown(save=True)
        server["proc"].wait(timeout=10)

    def start():
        server["proc"] = embedded.start_redis_server(data_dir=data, port=port, with_graph=True)

    with override_settings(FALKORDB_URL=embedded.server_url(port)):
        yield stop, start, port
    if server["proc"].poll() is None:
        server["proc"].terminate()
        server["proc"].wait(timeout=20)
    shutil.rmtree(data, ignore_errors=True)
