"""Debian 12's libc: at least 99% of its syscall sites are patched statically,
and `ferry sites` gives every other site with its reason."""
import json

from conftest import LIBC, ferry


def test_at_least_99_percent_of_libc_sites_are_patched():
    report = json.loads(ferry("sites", "--json", LIBC, check=True).stdout)
    summary = report["summary"]
    assert summary["sites"] >= 500  # Debian 12's libc has ~526
    assert summary["patched"] / summary["sites"] >= 0.99
    for site in report["sites"]:
        if site["status"] != "patched":
            assert site["reason"], site


def test_sites_report_every_field_for_each_site():
    report = json.loads(ferry("sites", "--json", LIBC, check=True).stdout)
    ids = [s["id"] for s in report["sites"]]
    assert len(ids) == len(set(ids))
    by_function = {s["function"]: s for s in report["sites"]}
    getppid = by_function["getppid"]
    assert getppid["syscall"] == "getppid" and getppid["nr"] == 110
    assert getppid["section"] == ".text"
    assert getppid["status"] == "patched"
    start, end = (int(v, 16) for v in getppid["window"])
    assert start <= int(getppid["address"], 16) < end and end - start >= 5
    assert "syscall" in getppid["window_insns"]
    known = [s for s in report["sites"] if s["nr"] is not None]
    assert len(known) / len(report["sites"]) > 0.85


def test_site_ids_are_stable_across_runs():
    a = json.loads(ferry("sites", "--json", LIBC, check=True).stdout)
    b = json.loads(ferry("sites", "--json", LIBC, check=True).stdout)
    assert [(s["id"], s["address"]) for s in a["sites"]] == [(s["id"], s["address"]) for s in b["sites"]]


def test_sites_table_lists_unpatched_reasons_and_summary():
    out = ferry("sites", LIBC, check=True).stdout
    assert "patched" in out
    assert "sites," in out.splitlines()[-1]
