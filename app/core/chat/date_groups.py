"""Chats grouped by when they were last active, as chat apps list them: Today, Yesterday, Previous 7 days, …"""

from __future__ import annotations

from datetime import date

TODAY, YESTERDAY, WEEK, MONTH, OLDER = "Today", "Yesterday", "Previous 7 days", "Previous 30 days", "Older"
GROUPS = (TODAY, YESTERDAY, WEEK, MONTH, OLDER)


def date_group(timestamp: float, now: float) -> str:
    """The group of a chat last active at ``timestamp`` (seconds since the epoch), seen at ``now``, in local time.

    Calendar days, not 24-hour spans: a chat from 23:59 yesterday is "Yesterday" at 00:01. A timestamp after
    ``now`` (a clock set back) counts as today.
    """
    days = (date.fromtimestamp(now) - date.fromtimestamp(timestamp)).days
    if days <= 0:
        return TODAY
    if days == 1:
        return YESTERDAY
    if days <= 7:
        return WEEK
    if days <= 30:
        return MONTH
    return OLDER
