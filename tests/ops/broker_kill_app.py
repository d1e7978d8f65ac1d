"""The project's Celery app with one more task, for a worker that tests run while its broker is killed:
a task that takes a while, leaving a mark when it starts and when it ends."""
import time
from pathlib import Path

from kintsugi_site.celery import app


@app.task(name="kintsugi_test.slow_mark", acks_late=True)
def slow_mark(folder: str, name: str, seconds: float) -> str:
    Path(folder, f"{name}.started").write_text("")
    time.sleep(seconds)
    Path(folder, f"{name}.done").write_text("")
    return name
