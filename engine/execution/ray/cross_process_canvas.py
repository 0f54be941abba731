"""Result placement across processes: actors on the driver's machine write the result's tiles into its array.

With the local executor the result's last aggregate computes each dense product straight into its
place in one array, which fetch_tensor() then hands over (execution/result_canvas.py). Under Ray that
aggregate runs in the actors: each result tile would be copied into the object store by its actor,
and again into one array by the driver (for a 2048 x 2048 float32 product, 4 MiB a tile). So the
driver makes the result's array in shared memory (an anonymous memory file, gone when the last
process using it lets go: nothing to clean up after a crash), and an actor on the driver's machine
(whichever Ray node it belongs to) maps it through the driver's /proc/<pid>/fd entry and places its
tiles there as the local executor does; a placed tile travels as a `Placed` marker, and the driver
puts its view of that place in the row. The ticket names the machine (its boot id and the pid
namespace), and a random token, checked in the mapped memory, makes sure an actor writes only into
the array made for it (a reused descriptor number, another process of that pid: it places nothing).
An actor on another machine, or one that cannot map the array, sends its tiles as usual, and the
driver copies each into its place as it arrives, while the other fragments still run.
"""
from __future__ import annotations

import ctypes
import math
import mmap
import os
import secrets
import stat
import weakref
from dataclasses import dataclass
from typing import Optional

import numpy as np

from trdb.errors import InternalError
from trdb.execution.operators.operator import Batch
from trdb.execution.result_canvas import ResultCanvas

NAME = "trdb-result"  # of the memory file: what an actor looks for before it opens one
HEADER_BYTES = mmap.PAGESIZE  # the token, then the array from the next page on
TOKEN_BYTES = 16
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


@dataclass(frozen=True)
class Ticket:
    """What an actor needs to map the driver's result array: where it is and what it holds."""
    machine: Optional[tuple]
    pid: int
    fd: int
    size: int
    token: bytes
    shape: tuple
    tile: tuple
    dtype: str


class Placed:
    """Stands in for a tile its actor wrote into the shared array: the tile's shape, not its values."""
    __slots__ = ("shape",)

    def __init__(self, shape: tuple):
        self.shape = shape

    def __reduce__(self):
        return Placed, (self.shape,)


class SharedCanvas:
    """On the driver: the result canvas's array made in shared memory, and the ticket actors map it by."""

    def __init__(self, canvas: ResultCanvas):
        self.canvas = canvas
        self.ticket: Optional[Ticket] = None
        self._fd: Optional[int] = None
        nbytes = math.prod(canvas.shape) * canvas.dtype.itemsize
        if not hasattr(os, "memfd_create") or nbytes == 0:
            return
        try:
            fd = os.memfd_create(NAME, os.MFD_CLOEXEC)
        except OSError:  # out of descriptors or memory: the result is placed by the driver alone
            return
        try:
            os.ftruncate(fd, HEADER_BYTES + nbytes)
        except OSError:
            os.close(fd)
            return
        memory = _mapped(fd, HEADER_BYTES + nbytes)
        if memory is None:
            os.close(fd)
            return
        token = secrets.token_bytes(TOKEN_BYTES)
        memory[:TOKEN_BYTES] = token
        canvas.array = _array(memory, canvas.shape, canvas.dtype)
        self._fd = fd
        self.ticket = Ticket(this_machine(), os.getpid(), fd, HEADER_BYTES + nbytes, token, canvas.shape, canvas.tile,
                             canvas.dtype.str)

    def close(self) -> None:
        """The execution has ended (its actors let go of the array): the descriptor goes; the array stays
        mapped for as long as the result holds it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def received(self, rows: Batch) -> Batch:
        """A batch the final gather received, with each tile in its place in the array: a `Placed` one's
        view, or a dense tile copied there (else the row as it came)."""
        canvas = self.canvas
        out = []
        for row in rows:
            value, key = row[-1], row[:-1]
            if isinstance(value, Placed):
                view = canvas.slot(key, value.shape, canvas.dtype)
                if view is None:
                    raise InternalError(f"a result tile placed by a Ray worker has no place of its own: key {key}")
                row = (*key, view)
            elif isinstance(value, np.ndarray):
                view = canvas.slot(key, value.shape, value.dtype)
                if view is not None:
                    view[...] = value
                    row = (*key, view)
            out.append(row)
        return out


def attach(ticket: Optional[Ticket]) -> Optional[ResultCanvas]:
    """In an actor: the driver's result canvas, mapped, if this actor runs on the driver's machine and finds
    the array the ticket names; else None (its tiles travel as usual). Nothing is opened but a memory file
    of trdb's name (opening another file could have effects of its own: a device's)."""
    if ticket is None or ticket.machine is None or ticket.machine != this_machine():
        return None
    path = f"/proc/{ticket.pid}/fd/{ticket.fd}"
    try:
        if not os.readlink(path).startswith(f"/memfd:{NAME} "):
            return None
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != ticket.size:
            return None
        memory = _mapped(fd, ticket.size)
    finally:
        os.close(fd)
    if memory is None or memory[:TOKEN_BYTES] != ticket.token:
        return None
    dtype = np.dtype(ticket.dtype)
    canvas = ResultCanvas(None, ticket.shape, ticket.tile, dtype, allocate=False)
    canvas.array = _array(memory, ticket.shape, dtype)
    return canvas


def this_machine() -> Optional[tuple]:
    """This machine's boot and this process's pid namespace: processes that agree see one /proc (None where
    there is no /proc to ask)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            namespace = os.stat("/proc/self/ns/pid")
            return boot.read().strip(), namespace.st_dev, namespace.st_ino
    except OSError:
        return None


def marked(rows: Batch, canvas: ResultCanvas) -> Batch:
    """In an actor: the batch with each tile placed in the shared array as a `Placed` marker."""
    return [(*row[:-1], Placed(row[-1].shape)) if canvas.holds(row[:-1], row[-1]) else row for row in rows]


def _mapped(fd: int, size: int) -> Optional[ctypes.Array]:
    """`size` bytes of the file `fd` mapped shared, read-write, as a buffer that unmaps them when it goes
    (with the last array made from it). Not Python's mmap: that keeps a duplicate of the descriptor open
    for as long as the mapping lives, one per result a caller holds."""
    address = _LIBC.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        return None
    memory = (ctypes.c_char * size).from_address(address)
    weakref.finalize(memory, _LIBC.munmap, address, size)
    return memory


def _array(memory: ctypes.Array, shape: tuple, dtype: np.dtype) -> np.ndarray:
    return np.frombuffer(memory, dtype=dtype, count=math.prod(shape), offset=HEADER_BYTES).reshape(shape)
