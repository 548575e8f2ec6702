"""What the gateway tests read off a running gateway: a Prometheus metric, uvicorn's log records."""

import contextlib
import logging

from server_client import http


def metric(url: str, name: str) -> float:
    text = http(url + "/metrics")[1]
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


@contextlib.contextmanager
def uvicorn_log():
    """The records of uvicorn's error log (it does not propagate to pytest's caplog)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(logging.DEBUG)
    loggers = [logging.getLogger("uvicorn.error"), logging.getLogger("llama_omni_py.server.gateway.app")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield records
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
