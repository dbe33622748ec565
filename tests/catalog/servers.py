"""Real HTTP servers on 127.0.0.1 that serve catalog files in each upstream source's URL layout.

:class:`CatalogServer` holds what every fetch test needs: the routes of the Azure Retail Prices
pages, the AWS price list and gpuhunt's published catalogs, an ``overrides[path]`` hook that
replaces a route (truncated bodies, 500s, hangs), the paths hit, and an optional
``Last-Modified`` per answer. Subclasses add the SkyPilot and Spot Advisor routes from their own
folder: hand-written fixtures (``test_fetch``) or recorded real files (``test_recorded``).
"""

from __future__ import annotations

import io
import ssl
import threading
import zipfile
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = Path(__file__).parent / "recorded"
GPUHUNT_VERSION = "20261120"
Override = Callable[[BaseHTTPRequestHandler], None]
Found = tuple[bytes, str | None] | None
"""A body and its Last-Modified header (None: no header), or None for a 404."""


class CatalogServer:
    """Serves the shared routes; ``overrides[path]`` replaces a route; ``hits`` lists paths asked."""

    gpuhunt_dir: Path = FIXTURES / "gpuhunt"

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        self.overrides: dict[str, Override] = {}
        self.hits: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                server.hits.append(url.path)
                if url.path in server.overrides:
                    server.overrides[url.path](self)
                    return
                found = server.body(url.path, parse_qs(url.query))
                if found is None:
                    self.send_error(404)
                    return
                body, modified = found
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                if modified:
                    self.send_header("Last-Modified", modified)
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        bound = self.httpd.server_address[1]
        scheme = "https" if tls is not None else "http"
        default = 443 if tls is not None else 80
        self.base = f"{scheme}://{host}" + ("" if bound == default else f":{bound}")
        self.next_base = f"{scheme}://{host}:{bound}"
        """What Azure next-page links start with: always with the port, as the real API writes
        ``https://prices.azure.com:443/…``."""
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def body(self, path: str, query: dict[str, list[str]]) -> Found:
        """The Azure, AWS price-list and gpuhunt routes (fixtures: no recording exists offline)."""
        parts = path.strip("/").split("/")
        if path == "/azure/api/retail/prices":
            text = (FIXTURES / "azure" / "page1.json").read_text().replace("{BASE}", self.next_base)
            return text.encode(), None
        if path == "/azure/page2":
            return (FIXTURES / "azure" / "page2.json").read_bytes(), None
        if parts[0] == "aws" and len(parts) == 3:
            return _file(FIXTURES / "aws-price-list" / parts[1] / parts[2])
        if parts[0] == "gpuhunt" and len(parts) == 3 and parts[2] == "version":
            ok = (self.gpuhunt_dir / f"{parts[1]}.csv").is_file()
            return (GPUHUNT_VERSION.encode(), None) if ok else None
        if parts[0] == "gpuhunt" and len(parts) == 4 and parts[3] == "catalog.zip":
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as zf:
                zf.write(self.gpuhunt_dir / f"{parts[1]}.csv", f"{parts[1]}.csv")
            return buf.getvalue(), None
        return None

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def self_signed_tls(host: str, folder: Path) -> tuple[ssl.SSLContext, Path]:
    """A server TLS context for ``host`` (an IP address) with a fresh self-signed certificate, and
    the certificate's PEM file for a client to trust (``SSL_CERT_FILE``)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = folder / "cert.pem"
    key_pem = folder / "key.pem"
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_pem, key_pem)
    return ctx, cert_pem


def _file(path: Path, modified: str | None = None) -> Found:
    return (path.read_bytes(), modified) if path.is_file() else None


class FixtureServer(CatalogServer):
    """Serves tests/catalog/fixtures: SkyPilot v8 files and a Spot Advisor file written by hand."""

    def body(self, path: str, query: dict[str, list[str]]) -> Found:
        parts = path.strip("/").split("/")
        if parts[:2] == ["skypilot", "v8"] and len(parts) == 4:
            return _file(FIXTURES / "skypilot" / parts[2] / parts[3])
        if path == "/spot-advisor-data.json":
            return _file(FIXTURES / "spot-advisor-data.json")
        return super().body(path, query)
