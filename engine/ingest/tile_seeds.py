"""The PCG64 states numpy.random.default_rng([seed, *key]) starts from, for many keys at once.

A seeded random FILL draws each tile from a generator seeded by (seed, key), so that its values do not
depend on the order tiles are written. numpy builds that generator in about 8 us (SeedSequence's
hashing in Python-facing code, then PCG64's seeding), more than drawing a small tile takes. Here
SeedSequence's mixing (O'Neill's seed_seq, as numpy implements it) runs on arrays over a run of
keys, PCG64's seeding on Python integers, and one generator is given each state in turn: the same
values, bit for bit (tests/statements/test_tile_seeds.py compares them with default_rng).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R, _XSHIFT, _POOL_SIZE = 0xCA01F9DD, 0x4973F715, 16, 4
_MASK32, _MASK128 = 0xFFFFFFFF, (1 << 128) - 1
_PCG_MULTIPLIER = (2549297995355413924 << 64) + 4865540595714422341


def pcg64_states(seed: int, keys: np.ndarray) -> Optional[list[tuple[int, int]]]:
    """(state, inc) of PCG64(SeedSequence([seed, *key])) for each row of `keys` (n x m, non-negative), or None
    when a key does not fit in 32 bits (its entropy would have more words: the caller seeds it as numpy does)."""
    keys = np.asarray(keys, dtype=np.int64).reshape(len(keys), -1)
    if seed < 0 or keys.size and (keys.min() < 0 or keys.max() > _MASK32):
        return None
    seed_words = _words(seed)
    entropy = [np.full(len(keys), word, dtype=np.uint32) for word in seed_words]
    entropy += [keys[:, d].astype(np.uint32) for d in range(keys.shape[1])]
    words = _generate_state(_pool(entropy), 8)
    halves = [(w_low.astype(np.uint64) | (w_high.astype(np.uint64) << np.uint64(32))).tolist()
              for w_low, w_high in zip(words[0::2], words[1::2])]
    return [_seeded(*values) for values in zip(*halves)]


def _words(value: int) -> list[int]:
    """An int as SeedSequence takes it: its 32-bit words, least significant first (0 is one word)."""
    words = []
    while True:
        words.append(value & _MASK32)
        value >>= 32
        if not value:
            return words


def _pool(entropy: list[np.ndarray]) -> list[np.ndarray]:
    """SeedSequence's pool of four words, each an array over the keys."""
    hash_const = [_INIT_A]

    def hashmix(value: np.ndarray) -> np.ndarray:
        value = value ^ np.uint32(hash_const[0])
        hash_const[0] = (hash_const[0] * _MULT_A) & _MASK32
        value = value * np.uint32(hash_const[0])
        return value ^ (value >> np.uint32(_XSHIFT))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        result = np.uint32(_MIX_MULT_L) * x - np.uint32(_MIX_MULT_R) * y
        return result ^ (result >> np.uint32(_XSHIFT))

    zeros = np.zeros_like(entropy[0])
    mixer = [hashmix(entropy[i] if i < len(entropy) else zeros) for i in range(_POOL_SIZE)]
    for source in range(_POOL_SIZE):
        for target in range(_POOL_SIZE):
            if source != target:
                mixer[target] = mix(mixer[target], hashmix(mixer[source]))
    for source in range(_POOL_SIZE, len(entropy)):
        for target in range(_POOL_SIZE):
            mixer[target] = mix(mixer[target], hashmix(entropy[source]))
    return mixer


def _generate_state(pool: list[np.ndarray], count: int) -> list[np.ndarray]:
    """SeedSequence.generate_state(count, uint32), each word an array over the keys."""
    hash_const = _INIT_B
    words = []
    for index in range(count):
        value = pool[index % len(pool)] ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_B) & _MASK32
        value = value * np.uint32(hash_const)
        words.append(value ^ (value >> np.uint32(_XSHIFT)))
    return words


def _seeded(high_state: int, low_state: int, high_inc: int, low_inc: int) -> tuple[int, int]:
    """PCG64's seeding (pcg_setseq_128_srandom_r) from the four 64-bit words of generate_state(4, uint64)."""
    inc = ((((high_inc << 64) | low_inc) << 1) | 1) & _MASK128
    state = (inc + ((high_state << 64) | low_state)) & _MASK128
    return (state * _PCG_MULTIPLIER + inc) & _MASK128, inc


def generator_at(generator: np.random.Generator, state: tuple[int, int]) -> np.random.Generator:
    """`generator` (over a PCG64) set to a state `pcg64_states` gave: as a fresh default_rng of that seed."""
    generator.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": state[0], "inc": state[1]},
                                     "has_uint32": 0, "uinteger": 0}
    return generator
