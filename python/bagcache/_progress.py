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

Single reads too: a read (``data[i]``, a torch Dataset's ``__getitem__``)
that waits for the iterator for more than about a second (WAIT_AFTER) -
one long read, or reads that keep regenerating evicted shards one after
another - shows the line of the wait, labelled "ROOT (reads wait for the
iterator)", with the records the iterator produced since the wait began::

    cache/ (reads wait for the iterator): 52000 records, 3.1 MiB, ...

The line is a status: the read that ends a wait erases it before it
returns (so the caller's own output never lands on it), and the next wait
draws it again, counting on; two seconds with no read in flight end it.  A
watch thread per process (started by the first LoadIt whose progress is
on, polling ``_CacheCore._reads()``, which never waits) decides; a wait of
another kind (``len()``, ...) takes the line over.

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
    # The parent's display and watch threads are not in the child, and
    # _lock may have been held by another thread at the fork: start afresh.
    global _lock, _active, _watch
    _lock = _threading.Lock()
    _active = None
    _watch = None


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
            self.clear()
        else:
            self.draw(s, rates)
            self._write("\n")

    def clear(self):
        """Erases the line (the next draw writes it anew)."""
        if self._width:
            self._write("\r" + " " * self._width + "\r")
            self._width = 0


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

    def clear(self):
        if self._broken:
            return
        try:
            self._bar.clear()
        except Exception:
            self._broken = True


class _Display:
    def __init__(self, core, label, background, stream, reads=None, started=None):
        self._core = _weakref.ref(core)
        self._background = background
        # The display of single reads (_Watch): the iterator's count when
        # the wait began, else None.
        self.reads = reads is not None
        self._pulled0 = reads or 0
        self.suspended = False  # reads: erased while no read waits (GIL-free flag)
        self._started = _time.monotonic() if started is None else started
        self._stop = _threading.Event()
        self._draw_lock = _threading.Lock()  # one draw at a time; guards done
        self.done = False  # finished: nothing more is drawn
        first = self._poll(core)
        # (Rates over the wait: a read's began before its display.)
        self._records0 = 0 if self.reads else first.records
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
        s = _Sample()
        last = getattr(self, "_last", None)  # None: the first poll
        if self.reads:
            # The records the iterator produced (given or skipped), from 0 at
            # the start of the wait (_Watch), as a count with no length.
            _, _, pulled, nbytes = core._reads()
            s.records, s.length, s.final = pulled - self._pulled0, 0, False
            s.bytes, s.draining = nbytes, True
            s.seconds = _time.monotonic() - self._started
            return s
        length, final, position, nbytes, draining = core._progress()
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
                if self.suspended:
                    continue
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

    def suspend(self):
        """A display of reads, when the last read in flight returns (called
        by the engine binding before the read returns to its caller): the
        line is erased and drawn again only when reads wait again."""
        with self._draw_lock:
            if not self.done and not self.suspended:
                self.suspended = True
                self._out.clear()

    def resume(self):
        with self._draw_lock:
            self.suspended = False

    def covers(self, core):
        return (self._background or self.reads) and self._core() is core


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
            if current.reads and not background:
                current._end(erase=True)  # a wait of its own takes over
            elif background or not current.covers(core):
                return None
            else:
                current._end(erase=True)  # its thread never takes _lock
            _active = None
        _active = _Display(core, label, background, _sys.stderr)
        return _active


def close_all():
    """Ends the watch and the display shown, if any (at exit, before the
    caches close)."""
    global _watch
    with _lock:
        current, watch, _watch = _active, _watch, None
    if watch is not None:
        watch.stop()
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


# ---- the watch of single reads -------------------------------------------------------

WAIT_AFTER = 1.0  # seconds reads wait for the iterator before they are shown
QUIET_AFTER = 2.0  # seconds with no read in flight that end a display

_watch = None  # the process's _Watch, once a LoadIt with progress on opened


class _Watched:
    """A core's last poll: the read begun last, the iterator's count, since
    when reads have been waiting for it (None: they are not) and since
    when no read has been in flight (None: one is)."""

    __slots__ = ("label", "seq", "pulled", "since", "pulled0", "quiet_since", "shown")

    def __init__(self, label, seq, pulled):
        self.label, self.seq, self.pulled = label, seq, pulled
        self.since = self.quiet_since = None
        self.pulled0 = 0
        self.shown = None


class _Watch:
    """Polls the watched cores every INTERVAL.  A core is waiting when a
    single read is in flight and either the iterator produced records since
    the last poll or the same read is still running (it waits for another
    filler).  WAIT_AFTER seconds of that show a display (when no other one
    is shown).  The last read in flight to return erases the line
    (_Display.suspend, called by the binding); the next wait draws it again,
    counting on; QUIET_AFTER seconds with no read in flight end it."""

    def __init__(self):
        self._cores = _weakref.WeakKeyDictionary()  # core -> _Watched
        self._cores_lock = _threading.Lock()
        self._stop = _threading.Event()
        self._thread = _threading.Thread(
            target=self._run, name="bagcache-progress-watch", daemon=True)
        self._thread.start()

    def add(self, core, label):
        with self._cores_lock:
            self._cores[core] = _Watched(label, *core._reads()[1:3])

    def stop(self):
        self._stop.set()
        if self._thread is not _threading.current_thread():
            self._thread.join()
        with self._cores_lock:
            items = [(c, w) for c, w in self._cores.items() if w.shown is not None]
        for core, w in items:
            self._end(core, w)

    def _end(self, core, w):
        shown, w.shown = w.shown, None
        try:
            core._set_read_shown(None)
        except Exception:
            pass
        shown._end(erase=True)
        with _lock:
            global _active
            if _active is shown:
                _active = None

    def _run(self):
        while not self._stop.wait(INTERVAL):
            with self._cores_lock:
                items = list(self._cores.items())
            for core, w in items:
                if self._stop.is_set():
                    return
                try:
                    self._poll(core, w)
                except Exception:  # closed: nothing more to show, or watch
                    if w.shown is not None:
                        self._end(core, w)
                    with self._cores_lock:
                        self._cores.pop(core, None)

    def _poll(self, core, w):
        global _active
        reading, seq, pulled, _ = core._reads()
        now = _time.monotonic()
        waiting = reading > 0 and (pulled > w.pulled or seq == w.seq)
        if waiting and w.since is None:
            w.since, w.pulled0 = now - INTERVAL, w.pulled  # since the last poll
        elif not waiting:
            w.since = None
        if reading > 0:
            w.quiet_since = None
        elif w.quiet_since is None:
            w.quiet_since = now
        w.seq, w.pulled = seq, pulled
        shown = w.shown
        if shown is not None:
            if shown.done or (w.quiet_since is not None and now - w.quiet_since >= QUIET_AFTER):
                self._end(core, w)
            elif waiting and shown.suspended and now - w.since >= 2 * INTERVAL:
                shown.resume()  # (a wait of two polls: not a flash per miss)
        elif w.since is not None and now - w.since >= WAIT_AFTER:
            with _lock:
                if _active is not None and not _active.done:
                    return  # another wait is shown
                _active = w.shown = _Display(
                    core, f"{w.label} (reads wait for the iterator)", False,
                    _sys.stderr, reads=w.pulled0, started=w.since)
            core._set_read_shown(w.shown)


def watch(core, label, setting):
    """Watches the single reads of `core` (when progress is on: enabled())."""
    global _watch
    if not enabled(setting):
        return
    with _lock:
        if _watch is None:
            _watch = _Watch()
        w = _watch
    w.add(core, label)
