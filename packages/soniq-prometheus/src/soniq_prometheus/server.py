"""The worker's ``/metrics`` endpoint: prometheus-client's own HTTP server in a daemon thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server


@dataclass
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread

    @classmethod
    def start(cls, registry: CollectorRegistry, *, port: int, addr: str = "127.0.0.1") -> MetricsServer:
        server, thread = start_http_server(port, addr=addr, registry=registry)
        return cls(server=server, thread=thread)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def stop(self) -> None:
        """Stop serving without blocking the caller (the worker's loop) on the server's poll interval."""

        def close() -> None:
            self.server.shutdown()
            self.server.server_close()

        threading.Thread(target=close, name="soniq-metrics-stop", daemon=True).start()
