"""The PE test set-up itself: a mingw-built program runs under the session's
wine, with its output, its file and its exit code."""


def test_mingw_program_runs_under_wine(wine, win_programs, tmp_path):
    out = tmp_path / "out.bin"
    r = wine.run(win_programs["write_count"], out, 12)
    assert r.returncode == 12 % 7, r.stderr
    assert r.stdout == b"wrote 12 bytes\r\n" or r.stdout == b"wrote 12 bytes\n"
    assert out.read_bytes() == b"x" * 12
