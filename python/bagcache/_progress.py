"""The progress display of LoadIt's long waits.

``len()`` on a root whose length is not known yet, ``wait_until_all_cached()``
and ``preload_all_async`` may drain an iterator for hours.  While they do, a
line on standard error shows how far the drain is, as ``bagcache cache
fill`` does::

    cache/: 120000 records, 45.2 MiB, 3986 records/s, 1.5 MiB/s, 30 s
    cache/: 120000 of 500000 records (24%), 45.2 MiB, ...   (length known)

rewritten in place (``\\r``) four times a second and ended with a newline
when the wait ends.  With tqdm installed, a tqdm bar shows the same instead.

Records are how far the iterator has been read into the cache (the
furthest position of this process's passes over it, or the length known);
MiB are the bytes of the records read from the iterator during the wait
(serialized, before compression); the rates are over the wait.

Who draws: a daemon thread per display, polling ``_CacheCore._progress()``
(which never waits) while the caller's thread is inside the engine with the
GIL released.  close() stops the thread, joins it and draws the final state:
once it returns nothing more is written.  At most one display is shown at
a time: a wait starting while another one is shown shows nothing, except
that a wait on a loader whose ``preload_all_async`` line is shown takes
that line over (it is erased and the wait's own line starts).
"""

import importlib as _importlib
import os as _os
import sys as _sys
import threading as _threading
import time as _time
import weakref as _weakref

INTERVAL = 0.25  # seconds between draws
_MIB = 1024.0 * 1024.0

_lock = _threading.Lock()  # guards _active
_active = None  # the display shown now (or finished, see _Display.done)


def _after_fork_in_child():
    # The parent's display thread is not in the child, and _lock may have
    # been held by another thread at the fork: start afresh.
    global _lock, _active
    _lock = _threading.Lock()
    _active = None


if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_after_fork_in_child)


def check_setting(value):
    """The ``progress`` argument: None (auto), True or False."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"progress must be None, True or False, not {value!r}")
    return value


def enabled(setting):
    """Whether a wait shows progress now, for a LoadIt's ``progress``: True
    and False decide; None shows it when standard error is a terminal and
    the environment variable BAGCACHE_PROGRESS is not "0"."""
    if setting is not None:
        return setting
    if _os.environ.get("BAGCACHE_PROGRESS", "").strip() == "0":
        return False
    err = _sys.stderr
    try:
        return err is not None and err.isatty()
    except (AttributeError, ValueError, OSError):  # closed or odd streams
        return False


class _Sample:
    """One poll of the engine, with the records shown (never decreasing)."""

    __slots__ = ("records", "length", "final", "bytes", "draining", "seconds")


def _tqdm_class():
    try:
        return _importlib.import_module("tqdm").tqdm
    except Exception:  # not installed, or broken: the plain line
        return None


def _columns(stream):
    try:
        return _os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0  # not a terminal: no clipping


class _Line:
    """The plain line: rewritten with "\\r", padded over a longer earlier
    one, clipped to the terminal's width (the label is shortened)."""

    def __init__(self, stream, label):
        self._stream = stream
        self._label = label
        self._width = 0
        self._columns = _columns(stream)
        self._broken = False

    def _text(self, s, rates):
        if s.final and s.length:
            counts = f"{s.records} of {s.length} records ({100 * s.records // s.length}%)"
        else:
            counts = f"{s.records} records"
        secs, new_records, new_bytes = rates
        mib = new_bytes / _MIB
        rec_rate = new_records / secs if secs > 0 else 0.0
        mib_rate = mib / secs if secs > 0 else 0.0
        body = (f"{counts}, {mib:.1f} MiB, {rec_rate:.0f} records/s, "
                f"{mib_rate:.1f} MiB/s, {secs:.0f} s")
        label = self._label
        room = self._columns - 1 - len(body) - 2 if self._columns else len(label)
        if len(label) > room:
            label = "..." + label[len(label) - max(room - 3, 0):] if room > 3 else ""
        return f"{label}: {body}" if label else body

    def _write(self, text):
        if self._broken:
            return
        try:
            self._stream.write(text)
            self._stream.flush()
        except Exception:  # a closed or failing stream: stop drawing
            self._broken = True

    def draw(self, s, rates):
        line = self._text(s, rates)
        pad = max(self._width - len(line), 0)
        self._width = max(self._width, len(line))
        self._write("\r" + line + " " * pad)

    def finish(self, s, rates, erase):
        if erase:
            self._write("\r" + " " * self._width + "\r")
        else:
            self.draw(s, rates)
            self._write("\n")


class _Bar:
    """tqdm's bar: n is the records shown, total the length once known,
    the MiB read as its postfix; tqdm shows the rate and the time."""

    def __init__(self, tqdm, stream, label, s):
        self._bar = tqdm(
            total=s.length if s.final else None,
            initial=s.records,
            desc=label,
            unit=" records",
            unit_scale=True,
            file=stream,
            mininterval=0,
            leave=True,
        )
        self._broken = False

    def draw(self, s, rates):
        if self._broken:
            return
        try:
            bar = self._bar
            if s.final and bar.total != s.length:
                bar.total = s.length
            bar.set_postfix_str(f"{rates[2] / _MIB:.1f} MiB", refresh=False)
            if s.records > bar.n:
                bar.update(s.records - bar.n)
            else:
                bar.refresh()
        except Exception:  # a failing tqdm or stream: stop drawing
            self._broken = True

    def finish(self, s, rates, erase):
        if erase:
            self._bar.leave = False
        else:
            self.draw(s, rates)
        try:
            self._bar.close()
        except Exception:
            pass


class _Display:
    def __init__(self, core, label, background, stream):
        self._core = _weakref.ref(core)
        self._background = background
        self._started = _time.monotonic()
        self._stop = _threading.Event()
        self._draw_lock = _threading.Lock()  # one draw at a time; guards done
        self.done = False  # finished: nothing more is drawn
        first = self._poll(core)
        self._records0 = first.records
        self._bytes0 = first.bytes
        self._last = first
        tqdm = _tqdm_class()
        if tqdm is not None:
            try:
                self._out = _Bar(tqdm, stream, label, first)
            except Exception:
                self._out = _Line(stream, label)
        else:
            self._out = _Line(stream, label)
        self._thread = _threading.Thread(
            target=self._run, name="bagcache-progress", daemon=True)
        self._thread.start()

    def _poll(self, core):
        length, final, position, nbytes, draining = core._progress()
        s = _Sample()
        last = getattr(self, "_last", None)  # None: the first poll
        if final and not draining and last is not None:
            records = length  # the drain went to the end
        elif final:
            records = min(position, length)
        else:
            records = max(length, position)
        if last is not None:
            records = max(records, last.records)
        s.records, s.length, s.final = records, length, final
        s.bytes, s.draining = nbytes, draining
        s.seconds = _time.monotonic() - self._started
        return s

    def _sample(self):
        """A new poll, or the last one when the core is closed or gone."""
        core = self._core()
        if core is None:
            return None
        try:
            s = self._poll(core)
        except ValueError:  # closed
            return None
        self._last = s
        return s

    def _rates(self, s):
        return (s.seconds, s.records - self._records0, s.bytes - self._bytes0)

    def _run(self):
        while not self._stop.wait(INTERVAL):
            s = self._sample()
            with self._draw_lock:
                if self.done or self._stop.is_set():
                    return
                if s is None or (self._background and not s.draining):
                    # The loader is gone, or the background drain ended.
                    s = self._last
                    self._out.finish(s, self._rates(s), erase=False)
                    self.done = True
                    return
                self._out.draw(s, self._rates(s))

    def _end(self, erase, finished=False):
        self._stop.set()
        try:
            if self._thread is not _threading.current_thread():
                self._thread.join()
        finally:
            with self._draw_lock:
                if not self.done:
                    self.done = True
                    s = self._sample() or self._last
                    if finished and s.final:
                        s.records = s.length  # the wait saw the end
                    self._out.finish(s, self._rates(s), erase)

    def close(self, finished=False):
        """Stops the thread and draws the final state, ending the line
        (finished: the wait succeeded, so a known length was reached).
        Nothing is drawn after this returns.  Idempotent."""
        global _active
        try:
            self._end(erase=False, finished=finished)
        finally:
            with _lock:
                if _active is self:
                    _active = None

    def covers(self, core):
        return self._background and self._core() is core


def start(core, label, setting, background=False):
    """Shows the progress of a wait on `core` (until close()), or of its
    preload_all drain (background: until the drain ends); None when off or
    when another display is shown."""
    global _active
    if not enabled(setting):
        return None
    with _lock:
        current = _active
        if current is not None and not current.done:
            if background or not current.covers(core):
                return None
            current._end(erase=True)  # its thread never takes _lock
            _active = None
        _active = _Display(core, label, background, _sys.stderr)
        return _active


def close_all():
    """Ends the display shown, if any (at exit, before the caches close)."""
    with _lock:
        current = _active
    if current is not None:
        current.close()


class Hook:
    """The ``progress`` of a ``_CacheCore``: called by the engine binding
    around a drain for ``len()``; returns a display (or None)."""

    __slots__ = ("label", "setting")

    def __init__(self, label, setting):
        self.label = label
        self.setting = setting

    def __call__(self, core):
        return start(core, self.label, self.setting)
