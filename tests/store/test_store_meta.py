"""What a store records about itself (``meta``), on SQLite and PostgreSQL: whether it was
created as a practice store, fixed at creation, and kept when the store is emptied."""

from __future__ import annotations

from ratchet_runner.store.store import Store


def test_the_practice_flag_is_recorded_when_the_store_is_created_and_never_by_a_later_open(
    store_url: str,
) -> None:
    real = Store(store_url)
    try:
        created = real.meta_value("created_at")
        assert created is not None
        assert float(created) > 0
        assert not real.is_practice()
    finally:
        real.close()
    reopened = Store(store_url, practice=True)  # opening an existing store changes nothing
    try:
        assert not reopened.is_practice()
        assert reopened.meta_value("created_at") == created
        reopened.mark_practice()  # what `ratchet reset --all --practice` does
        reopened.reset()  # emptying the store keeps what it is
        assert reopened.is_practice()
    finally:
        reopened.close()


def test_a_store_created_as_a_practice_store_says_so(store_url: str) -> None:
    store = Store(store_url, practice=True)
    try:
        assert store.is_practice()
        assert store.meta_value("practice") == "true"
        assert store.meta_value("no such key") is None
    finally:
        store.close()
