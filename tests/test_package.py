"""The package surface: one documented entry point (``from store import ...``), cheap to import,
and a wheel that installs exactly one top-level import name with the Alembic scripts inside it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import store
from store import errors

REPO = Path(__file__).resolve().parents[1]


def test_entry_point_names_are_the_real_classes() -> None:
    from store.manager import SessionManager
    from store.session_store import SessionStore

    assert store.SessionStore is SessionStore
    assert store.SessionManager is SessionManager
    assert store.SessionChanged is errors.SessionChanged
    for name in store.__all__:
        assert getattr(store, name) is not None, name
    with pytest.raises(AttributeError):
        _ = store.NoSuchThing


def test_import_store_loads_no_database_library() -> None:
    code = "import sys, store; print(sorted(m for m in ('sqlalchemy', 'alembic', 'pydantic') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# What a listing of an up-to-date store needs is SQLAlchemy Core (the schema's tables) and the
# listing: none of these (the ORM included: the schema maps no classes).
HEAVY = ("alembic", "pydantic", "httpx", "rich", "sqlalchemy.orm", "store.manager", "store.interchange")


def _loaded_after(code: str) -> list[str]:
    """The :data:`HEAVY` modules a fresh interpreter holds after running ``code``."""
    probe = f"import sys\n{code}\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return eval(done.stdout.strip().splitlines()[-1])  # a printed list of names


def test_listing_an_up_to_date_store_loads_only_what_it_needs(tmp_path: Path) -> None:
    """``SessionStore.connect`` and ``pi-store list`` on a store at the head revision: no Alembic,
    no pydantic models, no HTTP client (start-up time: tools/bench_startup.py)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with store.SessionStore.connect(url) as created:  # creates the schema (Alembic runs here)
        created.create(str(tmp_path)).append_message({"role": "user", "content": "hi", "timestamp": 1})
    api = f"from store import SessionStore\nSessionStore.connect({url!r}).list_all()"
    cli = f"import sys\nfrom store.cli import main\nsys.argv = ['pi-store', '--db', {url!r}, 'list']\n" \
          "try:\n    main()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code"
    assert _loaded_after(api) == []
    assert _loaded_after(cli) == []
    assert "store.manager" in _loaded_after(f"{api}\nimport store.manager")  # the probe sees them


def test_migrations_ship_inside_the_store_package() -> None:
    from store import migrations
    from store.db.engine import head_revision

    assert (Path(migrations.__file__).parent / "env.py").is_file()
    assert head_revision() is not None


@pytest.mark.slow
def test_wheel_has_one_top_level_name(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path), str(REPO)], check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"store"}
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["store"]
    assert "store/migrations/env.py" in names and "store/migrations/script.py.mako" in names
    assert any(n.startswith("store/migrations/versions/0001_") for n in names)
    assert "store/analysis/datasette.json" in names  # pi-store path --datasette-metadata reads it


def test_the_shared_folder_comes_from_the_environment(tmp_path: Path) -> None:
    """``PI_STORE_SHARED`` names the shared test data; without the data there, the tests that need
    it are skipped, each saying what it misses (README "Tests")."""
    test = "tests/format/test_jsjson.py::test_pi_written_files_are_present"
    env = {**os.environ, "PI_STORE_SHARED": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", test], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert "1 skipped" in done.stdout and f"shared test data not found: {tmp_path}" in done.stdout, done.stdout
    if (REPO.parent / "shared" / "corpus").is_dir():  # the default, ../shared beside the checkout
        env.pop("PI_STORE_SHARED")
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=300)
        assert "1 passed" in done.stdout, done.stdout
