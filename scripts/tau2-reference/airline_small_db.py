"""Builds a small airline database in tau2's FlightDB shape from the
original tau-bench airline data, keeping only what tau2's 50 airline tasks
need.

tau2's own airline db.json (over 4 MiB) is not mirrored here; its data is
tau-bench's (flights.json, users.json, reservations.json in
tau_bench/envs/airline/data), which this script converts: tau2's User
carries its user_id as a field where tau-bench keeps it only as the key.

What is kept:
  - every user and reservation the tasks name: in the gold actions'
    arguments, and in the tasks' text (user ids like emma_kim_9957 and
    reservation ids like EHGLP3 that exist in the data);
  - the owners of those reservations, and every reservation of every kept
    user (get_user_details lists them; an agent will look them up);
  - every flight those reservations and the actions reference, and every
    flight on the routes and dates the actions search, book or rebook, so
    that search_direct_flight for those queries answers as it would on the
    full data, and so does search_onestop_flight for the searches and
    bookings' whole trips.
Whole flights would not fit in ~500 KB, so a flight keeps only the dates
the tasks use: those its kept reservations are booked on, and those its
route is searched, booked or rebooked for (and, for one-stop searches,
its origin or destination). Order is the data's.

Usage:
  python airline_small_db.py --tasks TASKS.json --out OUT.json [--out ...]
      FLIGHTS.json USERS.json RESERVATIONS.json
The three files come from the tau-bench repository, e.g.
  git --git-dir=REPO show HEAD:tau_bench/envs/airline/data/flights.json
With --tau2 CHECKOUT the result is validated with tau2's FlightDB model
(run it with the reference venv's python).
"""

import argparse
import datetime
import json
import os
import re
import sys
import types
from pathlib import Path

USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d+\b")
RESERVATION_ID = re.compile(r"\b[A-Z0-9]{6}\b")


def walk(v):
    """Yields every (key, value) pair of nested dicts and lists."""
    if isinstance(v, dict):
        for k, x in v.items():
            yield k, x
            yield from walk(x)
    elif isinstance(v, list):
        for x in v:
            yield from walk(x)


def next_day(date):
    """The date a day after date (YYYY-MM-DD)."""
    return (datetime.date.fromisoformat(date) + datetime.timedelta(days=1)).isoformat()


def select(tasks, flights, users, reservations):
    """Returns the flights to keep (with the dates kept), and the user and
    reservation ids."""
    user_ids, res_ids = set(), set()
    # Dates wanted on each route and on each flight.
    route_dates, flight_dates = {}, {}
    # search_onestop_flight's legs: out of the origin on the date, into the
    # destination on the date or (after an overnight first leg) the next.
    from_dates, to_dates = {}, {}

    def one_stop(origin, destination, date):
        from_dates.setdefault(origin, set()).add(date)
        to_dates.setdefault(destination, set()).update({date, next_day(date)})
    for task in tasks:
        text = json.dumps(task)
        user_ids |= {u for u in USER_ID.findall(text) if u in users}
        res_ids |= {r for r in RESERVATION_ID.findall(text) if r in reservations}
        for a in (task.get("evaluation_criteria") or {}).get("actions") or []:
            args = a.get("arguments") or {}
            if "user_id" in args:
                user_ids.add(args["user_id"])
            if "reservation_id" in args:
                res_ids.add(args["reservation_id"])
            if a["name"].startswith("search") and "origin" in args and "date" in args:
                route_dates.setdefault((args["origin"], args["destination"]), set()).add(args["date"])
                one_stop(args["origin"], args["destination"], args["date"])
            if a["name"] == "book_reservation" and args.get("flights"):
                one_stop(args["origin"], args["destination"], args["flights"][0]["date"])
            # A leg booked or rebooked: its route on that date is searched for.
            for f in args.get("flights") or []:
                if isinstance(f, dict) and f.get("flight_number") in flights:
                    fl = flights[f["flight_number"]]
                    route_dates.setdefault((fl["origin"], fl["destination"]), set()).add(f["date"])
    # Owners of named reservations, then every reservation of every user.
    user_ids |= {reservations[r]["user_id"] for r in res_ids}
    for u in user_ids:
        res_ids |= {r for r in users[u]["reservations"] if r in reservations}
    # A kept reservation's flight keeps the dates it is booked on: its
    # status there is what a task can ask about.
    for r in res_ids:
        for f in reservations[r]["flights"]:
            flight_dates.setdefault(f["flight_number"], set()).add(f["date"])
    keep = {}
    for n, f in flights.items():
        want = (flight_dates.get(n, set()) | route_dates.get((f["origin"], f["destination"]), set())
                | from_dates.get(f["origin"], set()) | to_dates.get(f["destination"], set()))
        dates = {d: v for d, v in f["dates"].items() if d in want}
        if n in flight_dates or dates:
            g = dict(f)
            g["dates"] = dates
            keep[n] = g
    return keep, user_ids, res_ids


def convert_user(user_id, u):
    """tau-bench's user (keyed by id) as tau2's User, fields in its order."""
    out = {"user_id": user_id}
    for k in ("name", "address", "email", "dob", "payment_methods", "saved_passengers",
              "membership", "reservations"):
        out[k] = u[k]
    return out


def validate(checkout, db):
    pkg = types.ModuleType("tau2")
    pkg.__path__ = [str(Path(checkout) / "src" / "tau2")]
    sys.modules["tau2"] = pkg
    os.environ.setdefault("TAU2_DATA_DIR", "/nonexistent")
    from loguru import logger
    logger.remove()
    from tau2.domains.airline.data_model import FlightDB
    FlightDB.model_validate(db)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", required=True, help="tau2's airline tasks.json")
    ap.add_argument("--out", required=True, action="append", help="where to write db.json (repeatable)")
    ap.add_argument("--tau2", help="a tau2-bench checkout, to validate with FlightDB")
    ap.add_argument("flights")
    ap.add_argument("users")
    ap.add_argument("reservations")
    a = ap.parse_args()
    flights = json.loads(Path(a.flights).read_text())
    users = json.loads(Path(a.users).read_text())
    reservations = json.loads(Path(a.reservations).read_text())
    tasks = json.loads(Path(a.tasks).read_text())

    keep_flights, user_ids, res_ids = select(tasks, flights, users, reservations)
    db = {
        "flights": keep_flights,
        "users": {k: convert_user(k, u) for k, u in users.items() if k in user_ids},
        "reservations": {k: r for k, r in reservations.items() if k in res_ids},
    }
    if a.tau2:
        validate(a.tau2, db)
    text = json.dumps(db) + "\n"
    for out in a.out:
        Path(out).write_text(text)
    print("%d flights, %d users, %d reservations, %d bytes" % (
        len(db["flights"]), len(db["users"]), len(db["reservations"]), len(text)))


if __name__ == "__main__":
    main()
