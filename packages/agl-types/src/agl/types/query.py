"""Filter, sort and pagination types shared by every store query, and the query objects of the store contract.

Each ``LightningStore.query_*`` method validates its arguments into one of :class:`RolloutQuery`,
:class:`AttemptQuery`, :class:`SpanQuery`, :class:`ResourcesQuery`, :class:`WorkerQuery` and hands it to the
backend; the HTTP API takes the same objects as bodies (``POST .../search``) and query strings (``GET``).
A filter is declared once, on its field (``Annotated[..., Filter(attribute, op)]``): backends apply
:meth:`StoreQuery.where` generically, so adding a filter is a new field here and a keyword of the store
method.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    ClassVar,
    Generic,
    Literal,
    NamedTuple,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
    overload,
)

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from typing_extensions import Self, TypedDict

from .errors import InvalidRequestError
from .resources import ResourcesUpdate
from .rollouts import Attempt, Rollout, RolloutMode
from .spans import Span
from .statuses import RolloutStatus, WorkerStatus
from .workers import Worker

__all__ = [
    "MAX_PAGE",
    "AttemptQuery",
    "Condition",
    "Filter",
    "FilterField",
    "FilterLogic",
    "FilterOp",
    "FilterOptions",
    "PageInt",
    "PaginatedResult",
    "ResourcesQuery",
    "RolloutQuery",
    "SortOptions",
    "SortOrder",
    "SpanQuery",
    "StoreQuery",
    "Where",
    "WorkerQuery",
    "sort_fields",
]

T = TypeVar("T")

FilterLogic = Literal["and", "or"]
SortOrder = Literal["asc", "desc"]


class FilterField(TypedDict, total=False):
    """Conditions on one field: equality, membership, substring."""

    exact: Any
    within: Sequence[Any]
    contains: str


FilterOptions = dict[str, Any]
"""Field name → :class:`FilterField`, plus ``_aggregate`` (``"and"``/``"or"``) and ``_must`` (conditions that always hold)."""


class SortOptions(TypedDict):
    name: str
    order: SortOrder


class PaginatedResult(BaseModel, Sequence[T], Generic[T]):
    """One page of a query: a :class:`~collections.abc.Sequence` of its items (``index``, ``count``, ``in``,
    ``reversed`` included). ``total`` counts all matches."""

    items: list[T]
    limit: int = -1
    """-1 means unlimited."""
    offset: int = 0
    total: int = 0

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[T]:  # pyright: ignore[reportIncompatibleMethodOverride]
        return iter(self.items)

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        return self.items[index]

    def __repr__(self) -> str:
        end = "end" if self.limit < 0 else str(self.offset + self.limit)
        return f"<PaginatedResult {self.offset}:{end} of {self.total} {self.items!r}>"


# -- query objects of the store contract -------------------------------------------------------------

FilterOp = Literal["exact", "within", "contains"]
"""How a filter tests a row attribute: equality, membership in a list, case-sensitive substring."""

MAX_PAGE = 10**12
"""Largest ``limit`` or ``offset`` accepted (keeps every backend inside 64-bit integers)."""


@dataclass(frozen=True)
class Filter:
    """Declares a query field as a filter on the row attribute ``attribute``, tested with ``op``.

    ``must`` filters always hold (they scope the query, e.g. the rollout of a span query); the others
    are pooled with the query's ``filter_logic``. An ``exact`` filter given a list matches any of its values.
    """

    attribute: str
    op: FilterOp
    must: bool = False


class Condition(NamedTuple):
    """One filter of a query with its value, ready for a backend: ``attribute`` ``op`` ``value``
    (``within`` values are a frozenset)."""

    attribute: str
    op: FilterOp
    value: Any

    def test(self, actual: Any) -> bool:
        """Whether a row whose attribute is ``actual`` passes (the semantics every backend implements)."""
        if self.op == "exact":
            return actual == self.value
        if self.op == "within":
            return actual in self.value
        return actual is not None and self.value in actual


class Where(NamedTuple):
    """The filters of a query: ``must`` always hold; ``optional`` are pooled with ``logic``
    (with no optional filter, every row passes the pool)."""

    must: list[Condition]
    optional: list[Condition]
    logic: FilterLogic


def _as_list(value: Any) -> Any:
    """Tuples, sets and other collections of values become lists; a string stays a string (it is rejected
    where a list is expected, instead of being read as a list of characters)."""
    return list(value) if _is_collection(value) else value


def _is_collection(value: Any) -> bool:
    """A tuple, set or other iterable that is not already a list, a string, a mapping or a model."""
    if isinstance(value, (list, str, bytes, dict, BaseModel)):
        return False
    return isinstance(value, Iterable)


def _json_integer(value: Any) -> Any:
    # JSON Schema's "integer" includes 3.0 but not true; strict validation alone would get both wrong.
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


PageInt = Annotated[int, BeforeValidator(_json_integer)]
"""An integer of a query: ``3`` and ``3.0``, not ``"3"`` or ``true``."""

ValueList = Annotated[list[T], BeforeValidator(_as_list)]
"""A list of filter values; tuples and sets are accepted as lists."""


def _is_scalar(annotation: Any) -> bool:
    if annotation in (str, int, float, bool, type(None)):
        return True
    origin = get_origin(annotation)
    if origin is Literal:
        return True
    if origin in (Union, types.UnionType):
        return all(_is_scalar(arg) for arg in get_args(annotation))
    return False


def sort_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of ``model`` a query can sort by: those with scalar values."""
    return tuple(name for name, info in model.model_fields.items() if _is_scalar(info.annotation))


def _sort_field(model: type[BaseModel]) -> Any:
    """``Literal`` of the sort fields, so that validation and the JSON schema state them exactly."""
    return Literal[sort_fields(model)]


RolloutSortField = _sort_field(Rollout)
AttemptSortField = _sort_field(Attempt)
ResourcesSortField = _sort_field(ResourcesUpdate)
SpanSortField = _sort_field(Span)
WorkerSortField = _sort_field(Worker)


class StoreQuery(BaseModel):
    """Base of the query objects: sorting and pagination, validation, and the declared filters.

    A query is validated once, where it is built (``LightningStore.query_*`` or the HTTP route), so every
    backend receives well-formed values: known statuses and sort fields, integer ``limit >= -1`` and
    ``offset >= 0``. Validation is strict (``"10"`` is not a ``limit``). Filter fields carry a
    :class:`Filter` in their metadata; :meth:`where` lists those that are set.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    row_model: ClassVar[type[BaseModel]]
    """The model of the rows the query selects (its fields are the attributes filters and sorts name)."""
    filters: ClassVar[tuple[tuple[str, Filter], ...]] = ()
    """(field name, filter) of every filter field, in declaration order."""

    sort_order: SortOrder = "asc"
    limit: PageInt = Field(default=-1, ge=-1, le=MAX_PAGE)
    """-1: no limit; 0: no items, only the total."""
    offset: PageInt = Field(default=0, ge=0, le=MAX_PAGE)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.filters = tuple(
            (name, meta)
            for name, info in cls.model_fields.items()
            for meta in info.metadata
            if isinstance(meta, Filter)
        )

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> Self:
        """Validate the keyword arguments of a ``LightningStore.query_*`` call (``self`` is ignored).

        Raises :class:`InvalidRequestError` naming each bad argument and what it accepts.
        """
        values = dict(arguments)
        values.pop("self", None)
        try:
            return cls.__pydantic_validator__.validate_python(values)
        except ValidationError as exc:
            raise InvalidRequestError(describe_errors(cls, exc)) from None

    def where(self) -> Where:
        """The filters that are set (not ``None``), split into those that must hold and the pooled ones."""
        must: list[Condition] = []
        optional: list[Condition] = []
        values = self.__dict__
        for name, spec in self.filters:
            value = values[name]
            if value is None:
                continue
            op = spec.op
            if op == "within" or (op == "exact" and type(value) is list):
                op, value = "within", frozenset(cast("Iterable[Any]", value))
            if spec.must:
                must.append(Condition(spec.attribute, op, value))
            else:
                optional.append(Condition(spec.attribute, op, value))
        return Where(must, optional, values.get("filter_logic", "and"))


def describe_errors(model: type[BaseModel], exc: ValidationError) -> str:
    """One line per bad argument: where, what is wrong, what was given."""
    parts: list[str] = []
    for error in exc.errors(include_url=False):
        loc = error.get("loc", ())
        # the field, then list positions; union members' internal tags are left out
        where = ".".join(str(p) for i, p in enumerate(loc) if i == 0 or isinstance(p, int)) or "arguments"
        given = repr(error.get("input"))
        if len(given) > 80:
            given = given[:77] + "..."
        parts.append(f"{where}: {error.get('msg', 'invalid')} (got {given})")
    return f"invalid {model.__name__}: " + "; ".join(parts)


class RolloutQuery(StoreQuery):
    """Arguments of :meth:`LightningStore.query_rollouts`. Without ``sort_by``, creation order."""

    row_model: ClassVar[type[BaseModel]] = Rollout

    status_in: Annotated[ValueList[RolloutStatus] | None, Filter("status", "within")] = None
    rollout_id_in: Annotated[ValueList[str] | None, Filter("rollout_id", "within")] = None
    rollout_id_contains: Annotated[str | None, Filter("rollout_id", "contains")] = None
    mode_in: Annotated[ValueList[RolloutMode] | None, Filter("mode", "within")] = None
    filter_logic: FilterLogic = "and"
    sort_by: RolloutSortField | None = None  # pyright: ignore[reportInvalidTypeForm]


class AttemptQuery(StoreQuery):
    """Arguments of :meth:`LightningStore.query_attempts`: the attempts of one rollout."""

    row_model: ClassVar[type[BaseModel]] = Attempt

    rollout_id: Annotated[str, Filter("rollout_id", "exact", must=True)]
    sort_by: AttemptSortField | None = "sequence_id"  # pyright: ignore[reportInvalidTypeForm]


class ResourcesQuery(StoreQuery):
    """Arguments of :meth:`LightningStore.query_resources` (its filters always hold together)."""

    row_model: ClassVar[type[BaseModel]] = ResourcesUpdate

    resources_id: Annotated[str | None, Filter("resources_id", "exact")] = None
    resources_id_contains: Annotated[str | None, Filter("resources_id", "contains")] = None
    sort_by: ResourcesSortField | None = None  # pyright: ignore[reportInvalidTypeForm]


class SpanQuery(StoreQuery):
    """Arguments of :meth:`LightningStore.query_spans`; ``rollout_id`` may also list several rollouts
    (one request for a whole training step, see :meth:`LightningStore.query_spans_many`).

    Spans of several rollouts that tie in the sort (and an unsorted query) are ordered by rollout id,
    then by insertion; within one rollout, ties keep insertion order.
    """

    row_model: ClassVar[type[BaseModel]] = Span

    rollout_id: Annotated[
        str | Annotated[ValueList[str], Field(min_length=1)], Filter("rollout_id", "exact", must=True)
    ]
    """One rollout id, or a non-empty list of them."""
    attempt_id: str | None = None
    """An attempt id, ``"latest"`` (each rollout's latest attempt), or ``None`` for every attempt."""
    trace_id: Annotated[str | None, Filter("trace_id", "exact")] = None
    trace_id_contains: Annotated[str | None, Filter("trace_id", "contains")] = None
    span_id: Annotated[str | None, Filter("span_id", "exact")] = None
    span_id_contains: Annotated[str | None, Filter("span_id", "contains")] = None
    parent_id: Annotated[str | None, Filter("parent_id", "exact")] = None
    parent_id_contains: Annotated[str | None, Filter("parent_id", "contains")] = None
    name: Annotated[str | None, Filter("name", "exact")] = None
    name_contains: Annotated[str | None, Filter("name", "contains")] = None
    filter_logic: FilterLogic = "and"
    sort_by: SpanSortField | None = "sequence_id"  # pyright: ignore[reportInvalidTypeForm]

    @property
    def rollout_ids(self) -> list[str]:
        """The queried rollout ids, without repeats, in order."""
        value = self.rollout_id
        return [value] if isinstance(value, str) else list(dict.fromkeys(value))


class WorkerQuery(StoreQuery):
    """Arguments of :meth:`LightningStore.query_workers`."""

    row_model: ClassVar[type[BaseModel]] = Worker

    status_in: Annotated[ValueList[WorkerStatus] | None, Filter("status", "within")] = None
    worker_id_contains: Annotated[str | None, Filter("worker_id", "contains")] = None
    filter_logic: FilterLogic = "and"
    sort_by: WorkerSortField | None = None  # pyright: ignore[reportInvalidTypeForm]
