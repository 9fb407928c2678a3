"""The environment an enabled program starts with, built as the shim's exec
hook builds it (shim/src/exec.c, build_env), so that the program `ferry run`
starts and every child the shim starts are enabled the same way.

What Ferry adds is taken out again by the shim before the program's own code
runs (shim/src/environ.c): its settings go, and LD_PRELOAD and
LD_LIBRARY_PATH get back the values recorded in FERRY_WAS_<NAME> ("0": not
set; "1" followed by the value).
"""

RUN, PRELOAD, LIBDIR = "run", "preload", "libdir"

# Ferry's settings: the same list as shim/src/settings.h (a test compares
# them).  Only these, and the FERRY_WAS_ markers, are Ferry's; a program's
# own variables are never touched, whatever their names.
SETTINGS = ("FERRY_MODE", "FERRY_RUN_DIR", "FERRY_TRACE_SYSCALLS", "FERRY_EVENTS",
            "FERRY_CATCH_ALL", "FERRY_AGG", "FERRY_SHIM", "FERRY_CACHE", "FERRY_AVOID",
            "FERRY_TSC", "FERRY_WIN_LAUNCH", "FERRY_WIN_DLL", "FERRY_WIN_DETOURS", "FERRY_WIN_RUN_DIR",
            "FERRY_EXE", "FERRY_SLOT", "FERRY_PAD", "FERRY_SELF", "FERRY_EXECFN")
WAS_PREFIX = "FERRY_WAS_"


def is_setting(name):
    return name in SETTINGS or name.startswith(WAS_PREFIX)


def _add(env, name, ours, ours_last=False):
    """`ours` before the variable's old value (after it when `ours_last`),
    and the marker that gives the program the old value back."""
    old = env.get(name)
    env[name] = ours if not old else f"{old}:{ours}" if ours_last else f"{ours}:{old}"
    env[f"FERRY_WAS_{name}"] = "0" if old is None else "1" + old


def enabled_env(base, settings, how, shim=None, libdir=None):
    """`base` (the program's own environment) with the run's FERRY_* `settings`
    and what `how` needs: RUN (a rewritten image loads the shim itself),
    PRELOAD (the shim at `shim`, which patches libraries from their plans) or
    LIBDIR (the program's own file, its rewritten libraries from `libdir`)."""
    env = {k: v for k, v in base.items() if not is_setting(k)}
    env.update(settings)
    prepended = {PRELOAD: ["LD_PRELOAD"], LIBDIR: ["LD_PRELOAD", "LD_LIBRARY_PATH"]}.get(how, [])
    # What the shim takes out: every setting, a marker for each variable
    # prepended to, and the variable too where it was not set.  Go's runtime
    # finds the auxiliary vector right after the environment's NULL, and the
    # shim fills the slots left with ignored pairs: an even count of them
    # (shim/src/environ.c).  The pad goes before the markers, as the exec hook
    # puts it (build_env).
    gone = sum(1 for k in env if is_setting(k)) + sum(1 + (name not in env) for name in prepended)
    if gone % 2:
        env["FERRY_PAD"] = ""
    if how == PRELOAD:
        _add(env, "LD_PRELOAD", str(shim))
    elif how == LIBDIR:
        _add(env, "LD_PRELOAD", f"{libdir}/libferry.so")
        # the user's own directories first, as natively: the program
        # directory also links the system's libraries where ld.so looks
        # first (rewriter/instrument.py), which must not hide theirs
        _add(env, "LD_LIBRARY_PATH", str(libdir), ours_last=True)
    return env


def run_settings(profile, run_dir):
    """The FERRY_* settings of a run recording into `run_dir`, the same for
    `ferry run`, `ferry attach` and the GUI: the profile's, where process
    files go, the image cache the run's images are in, and the shim the exec
    hook preloads into children that have no image."""
    from ..rewriter import cache, shimlib
    return dict(profile.shim_env(), FERRY_RUN_DIR=str(run_dir), FERRY_CACHE=str(cache.root().absolute()),
                FERRY_SHIM=str(shimlib.path().resolve()))
