"""What a Lightning name resolves to when framework has nothing for it: importing it works, using it raises.

A library built on Lightning imports far more than one run uses (``LightningCLI`` for a branch that is
never taken, ``XLAAccelerator`` in a type hint), so an import must not fail. Using the name, by calling it,
reading an attribute of it or subclassing it, raises ``NotProvidedError`` naming it. ``isinstance(x, name)``
is False, since nothing can be an instance of what is not there.
"""

from __future__ import annotations

from typing import Any, NoReturn

from framework.errors import NotProvidedError

DOCS_PAGE = "docs/guide/libraries-built-on-lightning.md"


class NotProvided:
    """Stands for the Lightning name ``qualified_name`` (``"lightning.pytorch.accelerators.XLAAccelerator"``)."""

    __slots__ = ("_qualified_name",)

    def __init__(self, qualified_name: str) -> None:
        object.__setattr__(self, "_qualified_name", qualified_name)

    def _refuse(self, how: str) -> NoReturn:
        raise NotProvidedError(
            f"{self._qualified_name} ({how}) is not provided by framework: Lightning's names point at framework "
            f"here (framework as-lightning), and this one has no counterpart. {DOCS_PAGE} lists what is mapped; "
            "use the Lightning package itself where you need it."
        )

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("called")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):  # introspection (copy, pickle, typing) must go on
            raise AttributeError(name)
        self._refuse(f"its attribute {name!r} read")

    def __setattr__(self, name: str, value: Any) -> None:
        self._refuse(f"its attribute {name!r} set")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> NoReturn:
        self._refuse("subclassed")

    def __instancecheck__(self, instance: Any) -> bool:
        return False

    def __subclasscheck__(self, subclass: Any) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<{self._qualified_name}: not provided by framework>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (NotProvided, (self._qualified_name,))
