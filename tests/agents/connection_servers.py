"""Real servers the client's connection tests put in front of the live server: a front that counts the
TCP connections it accepts and decides each request's fate (forwarded, or the connection closed at a
chosen moment), which is also a forward proxy (absolute-form targets, CONNECT tunnels) and can serve TLS;
and a certificate authority of the test's own for it."""
from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import select
import socket
import ssl
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

# What the front does with a request, by name:
FORWARD = "forward"  # forwarded to the live server, its answer relayed
DROP = "drop"  # the connection closed without reading on: never run (a server closing it as it arrived)
RUN_AND_DROP = "run_and_drop"  # forwarded and run, then the connection reset with no answer (the server died)
CUT = "cut"  # forwarded and run, then its answer's head and half its body, and the connection closed
RESET_WHILE_SENDING = "reset_while_sending"  # reset after the headers, the body still on its way
ANSWER = "answer"  # the whole body read and answered here: {"received": <bytes>}, nothing forwarded

Fate = Callable[[int, int, str, str], str]  # (connection number, place on it, method, path) -> a fate


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as the kernel does for a process that dies with bytes unread."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


class Front:
    """An HTTP/1.1 server forwarding to `upstream`. `connections`: TCP connections accepted; `log`:
    (connection, place on it, method, path, fate, Proxy-Authorization) per request as it arrives;
    `received`: the requests read whole. `idle`: seconds an idle connection is kept (a keep-alive
    timeout; None: forever). `window`: the receive buffer of its sockets, small to make a large body
    wait on it. `tls`: an ssl context it serves with."""

    def __init__(self, upstream: str | None = None, *, fate: Fate | None = None, idle: float | None = None,
                 window: int | None = None, tls: ssl.SSLContext | None = None):
        self.upstream = urlsplit(upstream) if upstream else None
        self.fate = fate or (lambda conn, place, method, path: FORWARD)
        self.connections, self.log, self.received = 0, [], []
        self._lock = threading.Lock()
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = idle

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                with front._lock:
                    front.connections += 1
                    self.number, self.place = front.connections, 0

            def handle_one_request(self):
                try:
                    super().handle_one_request()
                except (TimeoutError, OSError):  # idle past the keep-alive timeout, or the client left
                    self.close_connection = True

            def _any(self):
                self.place += 1
                path = urlsplit(self.path).path if self.path.startswith("http://") else self.path
                fate = front.fate(self.number, self.place, self.command, path)
                with front._lock:
                    front.log.append((self.number, self.place, self.command, path, fate,
                                      self.headers.get("Proxy-Authorization")))
                if fate == RESET_WHILE_SENDING:
                    return self._gone(reset=True)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with front._lock:
                    front.received.append((self.command, path, len(body)))
                if fate == DROP:
                    return self._gone(reset=False)
                if fate == ANSWER:
                    return self._answer(200, "OK", json.dumps({"received": len(body)}).encode(), {})
                status, reason, data, headers = front.forward(self.command, path, body, self.headers)
                if fate == RUN_AND_DROP:
                    return self._gone(reset=True)
                if fate == CUT:
                    head = f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(data)}\r\n\r\n".encode()
                    self.wfile.write(head + data[:len(data) // 2])
                    self.wfile.flush()
                    return self._gone(reset=False)
                self._answer(status, reason, data, headers)

            def _answer(self, status, reason, data, headers):
                self.send_response(status, reason)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _gone(self, *, reset: bool):
                self.close_connection = True
                if reset:
                    _reset(self.connection)

            def do_CONNECT(self):
                self.place += 1
                with front._lock:
                    front.log.append((self.number, self.place, "CONNECT", self.path, FORWARD,
                                      self.headers.get("Proxy-Authorization")))
                host, port = self.path.rsplit(":", 1)
                far = socket.create_connection((host, int(port)), timeout=30)
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                _pipe(self.connection, far)
                self.close_connection = True

            do_GET = do_POST = do_PATCH = do_DELETE = do_HEAD = _any

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def server_bind(self):
                if window:
                    self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
                super().server_bind()

            def get_request(self):
                sock, address = self.socket.accept()
                if tls is None:
                    return sock, address
                sock.settimeout(10)
                return tls.wrap_socket(sock, server_side=True), address

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def forward(self, method: str, path: str, body: bytes, headers) -> tuple[int, str, bytes, dict]:
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
        try:
            conn.request(method, path, body=body or None, headers={
                k: v for k, v in headers.items() if k.lower() in ("authorization", "content-type", "accept")})
            answer = conn.getresponse()
            data = answer.read()
            kept = {name: answer.getheader(name) for name in ("Retry-After", "Location") if answer.getheader(name)}
            return answer.status, answer.reason, data, kept
        finally:
            conn.close()

    def requests(self, method: str | None = None) -> list[tuple]:
        with self._lock:
            return [entry for entry in self.log if method is None or entry[2] == method]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes (a CONNECT tunnel)."""
    a.settimeout(None)
    try:
        while True:
            ready, _, _ = select.select([a, b], [], [], 30)
            if not ready:
                return
            for src in ready:
                data = src.recv(65536)
                if not data:
                    return
                (b if src is a else a).sendall(data)
    except OSError:
        return
    finally:
        b.close()


def certificate_authority(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA of the test's own (its certificate written to `folder`/ca.pem) and a server context holding
    a certificate it signed for 127.0.0.1 and localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kintsugi test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return ca_file, context
