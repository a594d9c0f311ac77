"""Service install: systemd unit and launchd plist rendering, --print, install/uninstall.

What is real here: the rendered files, `systemd-analyze verify` on the unit,
plistlib on the plist, the CLI in a subprocess, file writes under a temp HOME,
and the real `systemctl` binary (which, in this container, has no user manager
to talk to: there is no systemd PID 1, so `systemctl --user` fails with
"Failed to connect to bus"; a test checks that install reports this and still
leaves a correct file). To check the *sequence* of service-manager commands,
one test puts a recording `systemctl`/`launchctl` script first on PATH: a
stand-in, because neither a user systemd instance nor launchd can run here.
"""

from __future__ import annotations

import os
import plistlib
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ctxos.packaging import installer

CLI = [sys.executable, "-c", "import sys; from ctxos.client.cli import main; sys.exit(main())"]
ODD_NAME = "My Work %h $HOME \"q\""  # space, a systemd specifier, a $ and quotes


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "CTXOS_WORKSPACE")}
    env["HOME"] = str(home)
    env.update(extra)
    return env


def _cli(args: list[str], home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=_env(home, **extra), timeout=60)


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / ODD_NAME
    ws.mkdir()
    return ws


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


def test_resolve_executable_is_absolute_and_runnable() -> None:
    argv = installer.resolve_executable()
    assert Path(argv[0]).is_absolute()
    assert os.access(argv[0], os.X_OK)
    out = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "service" in out.stdout


# ----------------------------------------------------------------------------- systemd unit


def _verify_unit(unit_dir: Path, name: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), SYSTEMD_LOG_COLOR="0")
    return subprocess.run(
        ["systemd-analyze", "verify", "--user", str(unit_dir / name)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed (Debian package: systemd)"
)
def test_unit_passes_systemd_analyze_verify(workspace: Path, home: Path, tmp_path: Path) -> None:
    odd_home = workspace / "home"  # the odd characters reach the unit through the home
    plan = installer.make_plan(workspace, platform="linux", home=odd_home, env={})
    home = odd_home
    assert plan.path == home / ".config/systemd/user" / plan.name
    assert plan.name == "ctxos.service"  # one per-user service
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    (unit_dir / plan.name).write_text(plan.content)
    result = _verify_unit(unit_dir, plan.name, tmp_path)
    assert result.returncode == 0, result.stderr
    # systemd-analyze exits 0 on mere warnings; any line about our file is a defect.
    assert plan.name not in result.stderr, result.stderr
    text = plan.content
    assert "Restart=on-failure" in text
    assert "WantedBy=default.target" in text
    exec_line = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert exec_line.startswith(f"ExecStart={plan.argv[0]} ") and Path(plan.argv[0]).is_absolute()
    assert exec_line.endswith(" daemon --all")
    folder = next(line for line in text.splitlines() if line.startswith("WorkingDirectory="))
    assert "%%h" in folder and "$HOME" in folder

    # Control: the same check does fail on a broken unit, so the pass above means something.
    broken = text.replace(f"ExecStart={plan.argv[0]}", "ExecStart=relative/ctxos")
    (unit_dir / plan.name).write_text(broken)
    bad = _verify_unit(unit_dir, plan.name, tmp_path)
    assert bad.returncode != 0 and "relative/ctxos" in bad.stderr


def test_unit_rejects_newline_in_path(home: Path, tmp_path: Path) -> None:
    ws = tmp_path / "bad\nname"
    with pytest.raises(installer.ServiceError):
        installer.make_plan(ws, platform="linux", home=home, env={})


def test_xdg_config_home_is_honoured(workspace: Path, home: Path, tmp_path: Path) -> None:
    plan = installer.make_plan(workspace, platform="linux", home=home, env={"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert plan.path == tmp_path / "cfg/systemd/user" / plan.name


# ----------------------------------------------------------------------------- launchd plist


def test_plist_parses_and_has_required_keys(workspace: Path, home: Path) -> None:
    plan = installer.make_plan(workspace, platform="darwin", home=home, env={})
    data = plistlib.loads(plan.content.encode("utf-8"))
    assert plan.path == home / "Library/LaunchAgents" / f"{plan.name}.plist"
    assert data["Label"] == plan.name and plan.name.startswith(installer.LABEL_PREFIX)
    assert data["ProgramArguments"] == plan.argv
    assert data["ProgramArguments"][-2:] == ["daemon", "--all"]
    assert Path(data["ProgramArguments"][0]).is_absolute()
    assert data["KeepAlive"] == {"SuccessfulExit": False}
    assert data["RunAtLoad"] is True
    assert data["WorkingDirectory"] == str(home)
    assert data["StandardOutPath"] == str(home / ".local/state/ctxos/logs/launchd.out.log")
    assert data["StandardErrorPath"] == str(home / ".local/state/ctxos/logs/launchd.err.log")
    assert installer.is_ours(plan.content)


# ----------------------------------------------------------------------------- --print


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_install_print_shows_file_and_writes_nothing(platform: str, workspace: Path, home: Path) -> None:
    result = _cli(["--workspace", str(workspace), "service", "install", "--print", "--platform", platform], home)
    assert result.returncode == 0, result.stderr
    plan = installer.make_plan(workspace, platform=platform, home=home, env={})  # type: ignore[arg-type]
    assert f"# would write: {plan.path}" in result.stdout
    assert plan.content.rstrip("\n") in result.stdout
    if platform == "linux":
        assert f"# then run: systemctl --user enable --now {plan.name}" in result.stdout
    else:
        assert f"# then run: launchctl bootstrap gui/{os.getuid()} {plan.path}" in result.stdout
        body = result.stdout[result.stdout.index("<?xml") :]
        assert plistlib.loads(body.encode())["Label"] == plan.name
    assert list(home.iterdir()) == []  # nothing written
    assert list(workspace.iterdir()) == []


def test_uninstall_and_status_print(workspace: Path, home: Path) -> None:
    out = _cli(["--workspace", str(workspace), "service", "uninstall", "--print", "--platform", "linux"], home)
    assert out.returncode == 0 and "# would run: systemctl --user disable --now ctxos.service" in out.stdout
    out = _cli(["--workspace", str(workspace), "service", "status", "--print", "--platform", "darwin"], home)
    assert out.returncode == 0 and "launchctl print gui/" in out.stdout


def test_platform_other_than_host_needs_print(workspace: Path, home: Path) -> None:
    other = "darwin" if sys.platform.startswith("linux") else "linux"
    out = _cli(["--workspace", str(workspace), "service", "install", "--platform", other], home)
    assert out.returncode == 2 and "use it with --print" in out.stderr
    assert list(home.iterdir()) == []


# ----------------------------------------------------------------------------- install / uninstall


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the real-systemctl path is Linux only")
@pytest.mark.skipif(shutil.which("systemctl") is None, reason="systemctl not installed")
def test_install_with_real_systemctl_and_no_user_manager(workspace: Path, home: Path, tmp_path: Path) -> None:
    """Real systemctl; no user manager can run in this container (no systemd PID 1).

    If a user manager *is* reachable (a developer's desktop), this test would start
    a real service, so it points XDG_RUNTIME_DIR and DBUS at an empty folder to keep
    systemctl from finding one.
    """
    runtime = tmp_path / "no-manager"
    runtime.mkdir(mode=0o700)
    extra = {"XDG_RUNTIME_DIR": str(runtime), "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/bus"}
    out = _cli(["--workspace", str(workspace), "service", "install"], home, **extra)
    plan = installer.make_plan(workspace, platform="linux", home=home, env={})
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"wrote {plan.path}" in out.stdout
    assert "service manager step failed" in out.stdout and "systemctl --user enable --now" in out.stdout
    assert plan.path.read_text() == plan.content

    status = _cli(["--workspace", str(workspace), "service", "status"], home, **extra)
    assert status.returncode == 0 and f"{plan.path}: installed" in status.stdout

    out = _cli(["--workspace", str(workspace), "service", "uninstall"], home, **extra)
    assert out.returncode == 0, out.stderr
    assert f"removed {plan.path}" in out.stdout and not plan.path.exists()
    status = _cli(["--workspace", str(workspace), "service", "status"], home, **extra)
    assert status.returncode == 3 and "not installed" in status.stdout


def _recording_tool(bin_dir: Path, name: str, log: Path, fail_on: str = "") -> None:
    """A stand-in for systemctl/launchctl that records its argv (see the module docstring)."""
    script = bin_dir / name
    script.write_text(
        "#!/bin/sh\n"
        f'echo "{name} $*" >> "{log}"\n'
        f'case "$*" in {fail_on or "__never__"}*) echo "not loaded" >&2; exit 113;; esac\n'
        "exit 0\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _calls(log: Path) -> list[str]:
    calls = log.read_text().splitlines() if log.exists() else []
    log.write_text("")
    return calls


def test_linux_install_is_idempotent_and_uninstall_removes_only_ours(
    workspace: Path, home: Path, tmp_path: Path
) -> None:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    _recording_tool(bin_dir, "systemctl", log)
    runner = installer.CommandRunner(env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    plan = installer.make_plan(workspace, platform="linux", home=home, env={})

    first = installer.install(plan, runner)
    assert first.ok and first.changed
    assert _calls(log) == ["systemctl --user daemon-reload", f"systemctl --user enable --now {plan.name}"]
    assert plan.path.read_text() == plan.content
    mtime = plan.path.stat().st_mtime_ns

    again = installer.install(plan, runner)
    assert again.ok and not again.changed and f"{plan.path} is up to date" in again.lines
    assert plan.path.stat().st_mtime_ns == mtime
    assert _calls(log) == ["systemctl --user daemon-reload", f"systemctl --user enable --now {plan.name}"]

    moved = installer.make_plan(workspace, platform="linux", home=home, env={}, executable=["/opt/other/ctxos"])
    updated = installer.install(moved, runner)
    assert updated.changed and "ExecStart=/opt/other/ctxos" in plan.path.read_text()
    assert _calls(log)[-1] == f"systemctl --user restart {plan.name}"

    assert installer.status(moved, runner).up_to_date
    assert _calls(log) == [f"systemctl --user is-enabled {plan.name}", f"systemctl --user is-active {plan.name}"]
    removed = installer.uninstall(moved, runner)
    assert removed.changed and not plan.path.exists()
    assert _calls(log) == [f"systemctl --user disable --now {plan.name}", "systemctl --user daemon-reload"]
    assert installer.uninstall(moved, runner).lines == [f"nothing to remove: {plan.path} does not exist"]

    # A file at the same path that install did not write is never touched.
    plan.path.write_text("[Service]\nExecStart=/usr/bin/true\n")
    with pytest.raises(installer.ServiceError, match="not written by ctxos"):
        installer.uninstall(plan, runner)
    with pytest.raises(installer.ServiceError, match="not written by ctxos"):
        installer.install(plan, runner)
    assert plan.path.read_text() == "[Service]\nExecStart=/usr/bin/true\n"
    assert _calls(log) == []
    state = installer.status(plan, runner)
    assert state.foreign and not state.installed


def test_darwin_install_is_idempotent_and_uninstall(workspace: Path, home: Path, tmp_path: Path) -> None:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    uid = os.getuid()
    # `launchctl print` fails until bootstrap ran, as the real one does for an unloaded agent.
    _recording_tool(bin_dir, "launchctl", log, fail_on="print")
    runner = installer.CommandRunner(env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    plan = installer.make_plan(workspace, platform="darwin", home=home, env={})

    first = installer.install(plan, runner)
    assert first.ok and first.changed
    assert plan.log_dir is not None and plan.log_dir.is_dir()  # launchd cannot create the log folder itself
    assert _calls(log) == [f"launchctl bootstrap gui/{uid} {plan.path}"]

    # Unchanged file, agent not loaded (print fails): bootstrap again.
    installer.install(plan, runner)
    assert _calls(log) == [f"launchctl print gui/{uid}/{plan.name}", f"launchctl bootstrap gui/{uid} {plan.path}"]

    # Unchanged file, agent loaded: nothing but the probe.
    _recording_tool(bin_dir, "launchctl", log)
    again = installer.install(plan, runner)
    assert again.ok and not again.changed and f"{plan.name} is loaded" in again.lines
    assert _calls(log) == [f"launchctl print gui/{uid}/{plan.name}"]

    changed = installer.make_plan(workspace, platform="darwin", home=home, env={}, executable=["/opt/other/ctxos"])
    installer.install(changed, runner)
    assert _calls(log) == [f"launchctl bootout gui/{uid}/{plan.name}", f"launchctl bootstrap gui/{uid} {plan.path}"]

    installer.uninstall(changed, runner)
    assert _calls(log) == [f"launchctl bootout gui/{uid}/{plan.name}"]
    assert not plan.path.exists()


def test_missing_service_manager_is_reported(workspace: Path, home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    runner = installer.CommandRunner(env={"PATH": str(empty)})
    plan = installer.make_plan(workspace, platform="darwin", home=home, env={})
    report = installer.install(plan, runner)
    assert not report.ok and plan.path.exists()
    assert any("launchctl not found on PATH" in line for line in report.lines)
    assert any("load it with: launchctl bootstrap" in line for line in report.lines)
