"""The local, read-only web viewer (`threadlog serve`). Its packages (the web extra) are
imported when it runs, so that the other commands start, and work, without them."""

from __future__ import annotations

import errno
import ipaddress
import sys

import click

from eventstore import Store, StoreError

from ..render import safe
from .group import cli
from .opening import _db_path, with_store
from .printing import _emit_json


def _host_names(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Each --allow-host NAME as a Host header names it (lowercase, an IPv6 address in
    brackets), checked before the database is opened: one with a scheme, port or path, or what
    no Host header holds, is refused."""
    names = []
    for value in values:
        name = value.strip().lower().removeprefix("[").removesuffix("]")
        try:
            names.append(f"[{name}]" if ipaddress.ip_address(name).version == 6 else name)
            continue
        except ValueError:
            pass
        if not name or not name.isprintable() or any(c in name for c in ":/ @*\\?#"):
            raise click.BadParameter(f"{safe(value)} is not a host name or address (give it without a scheme, port or path, "
                                     "as in --allow-host 192.168.1.20)", ctx, param)
        names.append(name)
    return tuple(names)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (keep it local: the viewer has no login).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to listen on (0: a free one, named in the address printed).")
@click.option("--allow-host", "allowed", multiple=True, metavar="NAME", callback=_host_names,
              help="Also answer requests addressed to NAME (a name or address of this machine, as the browser's "
                   "address bar has it), e.g. its LAN address when --host is 0.0.0.0. Repeatable. Only 127.0.0.1, "
                   "localhost and --host are answered otherwise: a page elsewhere cannot reach the viewer by a name "
                   "of its own (DNS rebinding).")
@click.option("--open", "open_browser", is_flag=True, help="Open the viewer in the default web browser.")
@click.option("--json", "as_json", is_flag=True,
              help='Also print the address served as JSON on stdout once listening: {"url", "db", "read_only"}.')
@with_store()
def serve(store: Store, host: str, port: int, allowed: tuple[str, ...], open_browser: bool, as_json: bool) -> None:
    """A local, read-only web viewer: threads, rows, replay, fork tree, blame, diff, live updates."""
    try:
        from ..web import create_app
        from ..web.server import run
    except ImportError as error:
        missing = (error.name or "a package").split(".")[0]
        raise StoreError(f"threadlog serve needs the web extra ({missing} is missing): pip install 'threadlog[web]'") from None
    import socket

    if not host.strip():
        raise click.BadParameter("names no address (127.0.0.1 keeps the viewer on this machine)", param_hint="--host")
    target = _db_path()  # store.path hides a URL's password
    name = f"[{host}]" if ":" in host else host  # an IPv6 address, as URLs and Host headers write it
    # Listening comes first: the viewer is announced (and a browser pointed at it) only once
    # the port is its own; before, a port in use was announced, and --open showed whatever
    # else listened there. Port 0 takes a free one, and the announced URL names it.
    try:
        listening = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except (OSError, OverflowError) as error:
        reason = "in use by another program" if isinstance(error, OSError) and error.errno == errno.EADDRINUSE else str(error)
        raise StoreError(f"cannot listen on {name} port {port}: {reason}; pass another --port (or --host)") from None
    port = listening.getsockname()[1]
    url = f"http://{name}:{port}/"
    hosts = sorted({"127.0.0.1", "localhost", name, *allowed})
    if as_json:
        _emit_json({"url": url, "db": store.path, "read_only": True})
        sys.stdout.flush()
    click.echo(f"serving {safe(store.path)} read-only at {url} (Ctrl-C stops)", err=True)
    if open_browser:
        import threading
        import webbrowser

        threading.Timer(0.5, webbrowser.open, [url]).start()
    with listening:
        run(create_app(target, hosts), listening)

