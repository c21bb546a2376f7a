# The interpreter's worker: one per context, run by the sandbox's python3.
# It reads one request per line on stdin ({"code": ..., "envs": {...}}),
# runs the code in one namespace kept between requests, and answers on
# its original stdout with JSON lines: {"type": "stdout"|"stderr", "text"}
# as the code writes (its subprocesses too: file descriptors 1 and 2 are
# pipes it reads), {"type": "error", "name", "value", "traceback"} when
# the code raises, then {"type": "done"}.
import codecs, json, os, sys, threading, traceback

proto = os.fdopen(os.dup(1), "w", buffering=1)
requests = os.fdopen(os.dup(0), "r")
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)  # the code reads nothing of the requests
os.close(null)
lock = threading.Lock()
MARK = os.urandom(16).hex().encode()


def send(m):
    with lock:
        proto.write(json.dumps(m) + "\n")
        proto.flush()


def pump(fd, kind, seen):
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    buf = b""
    while True:
        data = os.read(fd, 16384)
        if not data:
            return
        buf += data
        while True:
            i = buf.find(MARK)
            if i >= 0:
                text, buf = buf[:i], buf[i + len(MARK):]
            else:
                keep = 0  # the longest end of buf that may begin MARK
                for n in range(min(len(buf), len(MARK) - 1), 0, -1):
                    if MARK.startswith(buf[-n:]):
                        keep = n
                        break
                text, buf = buf[:len(buf) - keep], buf[len(buf) - keep:]
            out = dec.decode(text)
            if out:
                send({"type": kind, "text": out})
            if i < 0:
                break
            seen.set()


seen = {}
for fd, kind in ((1, "stdout"), (2, "stderr")):
    r, w = os.pipe()
    os.dup2(w, fd)
    os.close(w)
    seen[fd] = threading.Event()
    threading.Thread(target=pump, args=(r, kind, seen[fd]), daemon=True).start()

namespace = {"__name__": "__main__"}
for line in requests:
    req = json.loads(line)
    envs = req.get("envs") or {}
    saved = {k: os.environ.get(k) for k in envs}
    os.environ.update(envs)
    try:
        exec(compile(req["code"], "<code>", "exec"), namespace)
    except BaseException as e:
        sys.stdout.flush()
        sys.stderr.flush()
        send({"type": "error", "name": type(e).__name__, "value": str(e),
              "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))})
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    sys.stdout.flush()
    sys.stderr.flush()
    for fd in (1, 2):
        seen[fd].clear()
        os.write(fd, MARK)
    for fd in (1, 2):
        seen[fd].wait()
    send({"type": "done"})
