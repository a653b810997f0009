"""``CombinedLoader``: several loaders iterated together, as Lightning's ``utilities.combined_loader`` does it.

Modes:

- ``"min_size"`` (default): one batch from each loader per step, until the shortest ends;
- ``"max_size_cycle"``: until the longest ends, the shorter ones starting over when they end;
- ``"max_size"``: until the longest ends, an ended loader giving None;
- ``"sequential"``: each loader to its end, one after the other, as ``(batch, batch_idx, dataloader_idx)``.

The batches come in the shape the loaders were given in: a dict of loaders gives dicts of batches.

Example::

    loaders = {"a": DataLoader(range(6), batch_size=4), "b": DataLoader(range(15), batch_size=5)}
    for batch in CombinedLoader(loaders, "max_size_cycle"):
        batch["a"], batch["b"]                      # 3 steps; "a" starts over for the third
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["CombinedLoader"]

_LENGTH_OF_MODE: dict[str, Callable[[list[int]], int]] = {
    "min_size": min, "max_size_cycle": max, "max_size": max, "sequential": sum,
}


class CombinedLoader(Iterable):
    """Iterate ``iterables`` (a loader, or a dict, list or tuple of them, nested as you like) together in ``mode``
    (see the module). ``len()`` is the number of steps (when every loader has a length).

    :raises ValueError: where ``mode`` is not one of those above.
    """

    def __init__(self, iterables: Any, mode: str = "min_size") -> None:
        if mode not in _LENGTH_OF_MODE:
            raise ValueError(f"CombinedLoader(mode={mode!r}): accepted are {', '.join(map(repr, _LENGTH_OF_MODE))}.")
        from torch.utils._pytree import tree_flatten  # when one is made, not when the Trainer is imported

        self._iterables = iterables
        self._flattened, self._spec = tree_flatten(iterables)
        self._mode = mode
        self._iterator: Iterator[Any] | None = None

    @property
    def iterables(self) -> Any:
        """The loaders as given."""
        return self._iterables

    @property
    def mode(self) -> str:
        """How the loaders are combined."""
        return self._mode

    @property
    def flattened(self) -> list[Any]:
        """The loaders as one flat list (setting it replaces them, in the same shape)."""
        return self._flattened

    @flattened.setter
    def flattened(self, flattened: list[Any]) -> None:
        if len(flattened) != len(self._flattened):
            raise ValueError(f"CombinedLoader.flattened: {len(flattened)} loaders given for {len(self._flattened)}.")
        self._iterables = _unflatten(list(flattened), self._spec)
        self._flattened = list(flattened)

    @property
    def sampler(self) -> Any:
        """Each loader's ``sampler``, in the loaders' shape."""
        return _unflatten([getattr(loader, "sampler", None) for loader in self._flattened], self._spec)

    @property
    def batch_sampler(self) -> Any:
        """Each loader's ``batch_sampler``, in the loaders' shape."""
        return _unflatten([getattr(loader, "batch_sampler", None) for loader in self._flattened], self._spec)

    def __iter__(self) -> CombinedLoader:
        from torch.utils._pytree import tree_unflatten

        if self._mode == "sequential":
            self._iterator = _sequential(self._flattened)
        else:
            self._iterator = (tree_unflatten(batches, self._spec) for batches in _together(self._flattened, self._mode))
        return self

    def __next__(self) -> Any:
        if self._iterator is None:
            raise TypeError("CombinedLoader: call iter() on it before next().")
        return next(self._iterator)

    def __len__(self) -> int:
        lengths = []
        for loader in self._flattened:
            try:
                lengths.append(len(loader))
            except TypeError:
                raise TypeError(f"CombinedLoader: {type(loader).__name__} has no length, so neither has the "
                                "combination.") from None
        return _LENGTH_OF_MODE[self._mode](lengths) if lengths else 0

    def reset(self) -> None:
        """Forget the iteration under way (a loader's worker processes end with their iterator)."""
        self._iterator = None

    def __repr__(self) -> str:
        return f"CombinedLoader({len(self._flattened)} loaders, mode={self._mode!r})"


def _together(loaders: list[Any], mode: str) -> Iterator[list[Any]]:
    iterators = [iter(loader) for loader in loaders]
    ended = [False] * len(loaders)
    while iterators:
        batches = []
        for index, iterator in enumerate(iterators):
            try:
                batches.append(next(iterator))
                continue
            except StopIteration:
                ended[index] = True
            if mode == "min_size" or all(ended):
                return
            if mode == "max_size":
                batches.append(None)
            else:  # max_size_cycle: start the ended loader over
                iterators[index] = iter(loaders[index])
                batches.append(next(iterators[index]))
        if mode == "max_size" and all(batch is None for batch in batches):
            return
        yield batches


def _sequential(loaders: list[Any]) -> Iterator[tuple[Any, int, int]]:
    for dataloader_idx, loader in enumerate(loaders):
        for batch_idx, batch in enumerate(loader):  # one loader's workers at a time
            yield batch, batch_idx, dataloader_idx


def _unflatten(values: list[Any], spec: Any) -> Any:
    from torch.utils._pytree import tree_unflatten

    return tree_unflatten(values, spec)
