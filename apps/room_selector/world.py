"""The room-booking world: rooms, their bookings, the availability tool and the ground-truth choice.

A request asks for a room on a date, at a time, for a duration, for some attendees, with some
equipment and possibly wheelchair access. The right answer applies every rule:

1. the room is free for the whole slot (no booking overlaps it),
2. its capacity is at least the number of attendees,
3. it has every piece of equipment asked for,
4. it is wheelchair accessible when access is required,
5. among the rooms left, the one with the smallest capacity wins (ties: the shorter walk, then the name),
6. if no room is left, the answer is ``No Room``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BOOKINGS",
    "EQUIPMENT",
    "NO_ROOM",
    "ROOMS",
    "Booking",
    "Room",
    "RoomRequest",
    "best_room",
    "extract_choice",
    "free_rooms",
    "list_free_rooms",
]

NO_ROOM = "No Room"
EQUIPMENT = ("projector", "whiteboard", "video_conference", "speakerphone")


@dataclass(frozen=True)
class Room:
    name: str
    capacity: int
    equipment: frozenset[str]
    accessible: bool
    distance_m: int
    """Walk from the reception desk, in metres."""

    def as_tool_row(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "capacity": self.capacity,
            "equipment": sorted(self.equipment),
            "accessible": self.accessible,
            "distance_m": self.distance_m,
        }


@dataclass(frozen=True)
class Booking:
    room: str
    date: str
    """ISO date, ``YYYY-MM-DD``."""
    start: str
    """``HH:MM``, 24-hour clock."""
    duration_min: int


@dataclass(frozen=True)
class RoomRequest:
    date: str
    time: str
    duration_min: int
    attendees: int
    needs: tuple[str, ...] = field(default_factory=tuple)
    accessible_required: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoomRequest:
        return cls(
            date=str(data["date"]),
            time=str(data["time"]),
            duration_min=int(data["duration_min"]),
            attendees=int(data["attendees"]),
            needs=tuple(data.get("needs") or ()),
            accessible_required=bool(data.get("accessible_required", False)),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "time": self.time,
            "duration_min": self.duration_min,
            "attendees": self.attendees,
            "needs": list(self.needs),
            "accessible_required": self.accessible_required,
        }


def _room(name: str, capacity: int, equipment: Iterable[str], accessible: bool, distance_m: int) -> Room:
    return Room(name, capacity, frozenset(equipment), accessible, distance_m)


ROOMS: tuple[Room, ...] = (
    _room("Aspen", 4, ["whiteboard"], True, 10),
    _room("Birch", 6, ["projector", "whiteboard"], False, 15),
    _room("Cedar", 8, ["video_conference", "speakerphone"], True, 25),
    _room("Elm", 10, ["projector", "video_conference"], False, 20),
    _room("Maple", 12, ["projector", "whiteboard", "speakerphone"], True, 40),
    _room("Oak", 16, ["projector", "video_conference", "whiteboard"], True, 55),
    _room("Pine", 20, ["projector", "speakerphone"], False, 35),
    _room("Willow", 30, ["projector", "video_conference", "whiteboard", "speakerphone"], True, 70),
)
ROOMS_BY_NAME = {room.name: room for room in ROOMS}

BOOKINGS: tuple[Booking, ...] = (
    Booking("Aspen", "2026-03-02", "09:00", 60),
    Booking("Cedar", "2026-03-02", "10:00", 120),
    Booking("Oak", "2026-03-02", "13:00", 90),
    Booking("Maple", "2026-03-02", "09:30", 60),
    Booking("Birch", "2026-03-03", "11:00", 60),
    Booking("Elm", "2026-03-03", "09:00", 180),
    Booking("Willow", "2026-03-03", "14:00", 120),
    Booking("Maple", "2026-03-03", "15:00", 60),
    Booking("Aspen", "2026-03-04", "10:00", 240),
    Booking("Cedar", "2026-03-04", "13:30", 60),
    Booking("Pine", "2026-03-04", "09:00", 120),
    Booking("Oak", "2026-03-04", "15:00", 60),
    Booking("Birch", "2026-03-05", "08:30", 90),
    Booking("Maple", "2026-03-05", "12:00", 120),
    Booking("Willow", "2026-03-05", "09:00", 60),
    Booking("Elm", "2026-03-05", "16:00", 60),
)

_TIME = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


def _minutes(hhmm: str) -> int:
    match = _TIME.match(hhmm)
    if match is None:
        raise ValueError(f"time must be HH:MM on a 24-hour clock, got {hhmm!r}")
    return int(match.group(1)) * 60 + int(match.group(2))


def free_rooms(date: str, time: str, duration_min: int) -> list[Room]:
    """Rooms with no booking overlapping ``[time, time + duration_min)`` on ``date``, nearest first."""
    if duration_min <= 0:
        raise ValueError(f"duration_min must be positive, got {duration_min}")
    start = _minutes(time)
    end = start + duration_min
    busy = {
        booking.room
        for booking in BOOKINGS
        if booking.date == date
        and _minutes(booking.start) < end
        and start < _minutes(booking.start) + booking.duration_min
    }
    return sorted((room for room in ROOMS if room.name not in busy), key=lambda r: (r.distance_m, r.name))


def list_free_rooms(date: str, time: str, duration_min: int) -> list[dict[str, Any]]:
    """The agent's tool: the rooms free for the slot with their capacity, equipment, access and distance."""
    return [room.as_tool_row() for room in free_rooms(date, time, duration_min)]


def best_room(request: RoomRequest) -> str:
    """The ground-truth answer: the name of the right room, or ``No Room``."""
    fitting = [
        room
        for room in free_rooms(request.date, request.time, request.duration_min)
        if room.capacity >= request.attendees
        and set(request.needs) <= room.equipment
        and (room.accessible or not request.accessible_required)
    ]
    if not fitting:
        return NO_ROOM
    return min(fitting, key=lambda r: (r.capacity, r.distance_m, r.name)).name


_NO_ROOM_PATTERN = re.compile(r"\bno\s+(?:suitable\s+|available\s+|free\s+)?room\b|\bnone\b", re.IGNORECASE)
_FINAL = re.compile(r"final\s+answer\s*[:\-]\s*(.+)", re.IGNORECASE)


def extract_choice(text: str | None) -> str | None:
    """The room an answer names (``No Room`` included), or ``None`` when it names none or several.

    A line ``Final answer: X`` wins; otherwise the answer must mention exactly one room, or say
    that no room fits.
    """
    if not text:
        return None
    final = _FINAL.findall(text)
    if final:
        text = final[-1]
    names = [name for name in ROOMS_BY_NAME if re.search(rf"\b{name}\b", text, re.IGNORECASE)]
    if len(names) == 1:
        return names[0]
    if not names and _NO_ROOM_PATTERN.search(text):
        return NO_ROOM
    return None
