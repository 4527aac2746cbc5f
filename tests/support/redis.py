"""Redis on the wire for the tests: one RESP command on a fresh connection."""
import socket


def redis_cmd(port, *args):
    """One RESP command on a fresh connection; the decoded reply."""
    out = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in map(str, args))
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(out)
        f = s.makefile("rb")
        return _read(f)


def _read(f):
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind in (b"+", b"-"):
        return rest.decode()
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2].decode()
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise ValueError(line)


def redis_raw(port, *args):
    """One RESP command; the raw reply bytes (as much as one read returns)."""
    msg = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a), a) for a in (x if isinstance(x, bytes) else x.encode()
                                                  for x in args))
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(msg)
        return s.recv(4096)
