"""What can be checked on Linux of the recipes that run on macOS, Windows and the hosted CI.

The Inno Setup script is read section by section and held to the parameters and flags that Inno
Setup's documentation lists for each section (https://jrsoftware.org/ishelp/); the workflow to
its structure; the macOS spec is run with stand-ins for PyInstaller's build targets to see what
it would ask of BUNDLE; the shell script goes through ``bash -n`` (and shellcheck when there is
one); and every file a recipe names must exist in the checkout.
"""

from __future__ import annotations

import plistlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PureWindowsPath
from typing import Any

import pytest

from app import autostart
from backend import __version__

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
ISS = ROOT / "packaging" / "windows" / "pair.iss"
PS1 = ROOT / "packaging" / "windows" / "build_installer.ps1"
BUILD_APP = ROOT / "packaging" / "macos" / "build_app.sh"
MACOS_SPEC = ROOT / "packaging" / "pair-macos.spec"
ENTITLEMENTS = ROOT / "packaging" / "macos" / "entitlements.plist"

# --- Inno Setup, from its documentation -----------------------------------------------------

# Parameters every section with entries takes (topic_commonparams, topic_componentstasksparams).
COMMON_PARAMS = {
    "Languages",
    "MinVersion",
    "OnlyBelowVersion",
    "Components",
    "Tasks",
    "Check",
    "BeforeInstall",
    "AfterInstall",
}
ENTRY_PARAMS = {
    "Languages": {"Name", "MessagesFile", "LicenseFile", "InfoBeforeFile", "InfoAfterFile"},
    # [Tasks] takes no Tasks or Components of its own beyond the ones below.
    "Tasks": {"Name", "Description", "GroupDescription", "Components", "Flags", "Languages"},
    "Files": {
        "Source",
        "DestDir",
        "DestName",
        "Excludes",
        "ExternalSize",
        "CopyMode",
        "Attribs",
        "Permissions",
        "FontInstall",
        "StrongAssemblyName",
        "Flags",
    }
    | COMMON_PARAMS,
    "Icons": {
        "Name",
        "Filename",
        "Parameters",
        "WorkingDir",
        "HotKey",
        "Comment",
        "IconFilename",
        "IconIndex",
        "AppUserModelID",
        "AppUserModelToastActivatorCLSID",
        "Flags",
    }
    | COMMON_PARAMS,
    "Registry": {"Root", "Subkey", "ValueType", "ValueName", "ValueData", "Permissions", "Flags"}
    | COMMON_PARAMS,
    "Run": {
        "Filename",
        "Description",
        "Parameters",
        "WorkingDir",
        "StatusMsg",
        "RunOnceId",
        "Verb",
        "Flags",
    }
    | COMMON_PARAMS,
    "UninstallDelete": {"Type", "Name"} | COMMON_PARAMS,
}
FLAGS = {
    "Tasks": {
        "checkablealone",
        "checkedonce",
        "dontinheritcheck",
        "exclusive",
        "restart",
        "unchecked",
    },
    "Files": {
        "32bit",
        "64bit",
        "allowunsafefiles",
        "comparetimestamp",
        "confirmoverwrite",
        "createallsubdirs",
        "deleteafterinstall",
        "dontcopy",
        "dontverifychecksum",
        "external",
        "fontisnttruetype",
        "gacinstall",
        "ignoreversion",
        "isreadme",
        "nocompression",
        "noencryption",
        "noregerror",
        "onlyifdestfileexists",
        "onlyifdoesntexist",
        "overwritereadonly",
        "promptifolder",
        "recursesubdirs",
        "regserver",
        "regtypelib",
        "replacesameversion",
        "restartreplace",
        "setntfscompression",
        "sharedfile",
        "sign",
        "signonce",
        "skipifsourcedoesntexist",
        "solidbreak",
        "sortfilesbyextension",
        "sortfilesbyname",
        "touch",
        "uninsnosharedfileprompt",
        "uninsremovereadonly",
        "uninsrestartdelete",
        "uninsneveruninstall",
        "unsetntfscompression",
    },
    "Icons": {
        "closeonexit",
        "createonlyiffileexists",
        "dontcloseonexit",
        "excludefromshowinnewinstall",
        "foldershortcut",
        "preventpinning",
        "runmaximized",
        "runminimized",
        "uninsneveruninstall",
        "useapppaths",
    },
    "Registry": {
        "createvalueifdoesntexist",
        "deletekey",
        "deletevalue",
        "dontcreatekey",
        "noerror",
        "preservestringtype",
        "uninsclearvalue",
        "uninsdeletekey",
        "uninsdeletekeyifempty",
        "uninsdeletevalue",
    },
    "Run": {
        "32bit",
        "64bit",
        "hidewizard",
        "nowait",
        "postinstall",
        "runascurrentuser",
        "runasoriginaluser",
        "runhidden",
        "runmaximized",
        "runminimized",
        "shellexec",
        "skipifdoesntexist",
        "skipifnotsilent",
        "skipifsilent",
        "unchecked",
        "waituntilidle",
        "waituntilterminated",
    },
}
# [Setup] directives this script may use (topic_setupsection and its directive pages).
SETUP_DIRECTIVES = {
    "AppComments",
    "AppId",
    "AppName",
    "AppPublisher",
    "AppVerName",
    "AppVersion",
    "ArchitecturesAllowed",
    "ArchitecturesInstallIn64BitMode",
    "CloseApplications",
    "Compression",
    "DefaultDirName",
    "DisableProgramGroupPage",
    "MinVersion",
    "OutputBaseFilename",
    "OutputDir",
    "PrivilegesRequired",
    "SetupIconFile",
    "SolidCompression",
    "UninstallDisplayIcon",
    "UninstallDisplayName",
    "WizardStyle",
}
REGISTRY_ROOTS = {"HKCU", "HKLM", "HKCR", "HKU", "HKCC", "HKA"}
VALUE_TYPES = {"none", "string", "expandsz", "multisz", "dword", "qword", "binary"}
UNINSTALL_DELETE_TYPES = {"files", "filesandordirs", "dirifempty"}
GUID_APP_ID = re.compile(r"\{\{[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}\}")


_PARAM = re.compile(r'\s*(\w+)\s*:\s*("(?:[^"]|"")*"|[^;]*?)\s*(?:;|$)')


def _split_entry(line: str) -> dict[str, str]:
    """``Name: "a b"; Flags: x y`` as a dict, unquoting ``"..."`` (``""`` is one quote)."""
    params: dict[str, str] = {}
    position = 0
    while position < len(line):
        match = _PARAM.match(line, position)
        assert match, f"not a parameter at {line[position:]!r}"
        assert match.end() > position
        name, value = match.groups()
        if value.startswith('"'):
            value = value[1:-1].replace('""', '"')
        assert name not in params, f"{name} twice in {line!r}"
        params[name] = value
        position = match.end()
    return params


def _iss() -> tuple[list[str], dict[str, list[str]]]:
    """The preprocessor lines and the lines of each section (comments and blanks left out)."""
    preprocessor: list[str] = []
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in ISS.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(";"):
            continue
        if line.startswith("#"):
            preprocessor.append(line)
            continue
        header = re.fullmatch(r"\[(\w+)\]", line)
        if header:
            assert header.group(1) not in sections, f"[{header.group(1)}] twice"
            current = sections.setdefault(header.group(1), [])
            continue
        assert current is not None, f"a line before any section: {line!r}"
        current.append(line)
    return preprocessor, sections


def _setup() -> dict[str, str]:
    setup: dict[str, str] = {}
    for line in _iss()[1]["Setup"]:
        name, _, value = line.partition("=")
        assert name.strip() not in setup, f"{name} twice"
        setup[name.strip()] = value.strip()
    return setup


def _entries(section: str) -> list[dict[str, str]]:
    return [_split_entry(line) for line in _iss()[1][section]]


def _defines() -> set[str]:
    """Names the script defines itself, and those build_installer.ps1 passes with /D."""
    preprocessor, _sections = _iss()
    own = {match.group(1) for line in preprocessor if (match := re.match(r"#define (\w+)", line))}
    passed = set(re.findall(r'"/D(\w+)=', PS1.read_text(encoding="utf-8")))
    return own | passed


def test_the_inno_script_has_every_section_the_installer_needs() -> None:
    _preprocessor, sections = _iss()
    assert set(sections) == {
        "Setup",
        "Languages",
        "Tasks",
        "Files",
        "Icons",
        "Registry",
        "Run",
        "UninstallDelete",
    }


def test_the_setup_section_uses_documented_directives_with_the_required_values() -> None:
    setup = _setup()

    assert set(setup) <= SETUP_DIRECTIVES, set(setup) - SETUP_DIRECTIVES
    assert GUID_APP_ID.fullmatch(setup["AppId"]), "AppId is a GUID, its { doubled"
    assert setup["AppName"] == "PAIR"
    assert setup["AppVersion"] == "{#AppVersion}"
    assert setup["DefaultDirName"] == r"{autopf}\PAIR"
    assert setup["SetupIconFile"] == "{#IconFile}"
    assert setup["UninstallDisplayIcon"] == r"{app}\pair.ico"
    # Per user: HKCU and the Startup task then belong to the user who installs.
    assert setup["PrivilegesRequired"] == "lowest"
    assert "PrivilegesRequiredOverridesAllowed" not in setup
    assert setup["OutputBaseFilename"] == "PAIR-{#AppVersion}-setup"


@pytest.mark.parametrize("section", sorted(ENTRY_PARAMS))
def test_every_entry_uses_only_documented_parameters_and_flags(section: str) -> None:
    entries = _entries(section)
    assert entries
    for entry in entries:
        assert set(entry) <= ENTRY_PARAMS[section], (section, set(entry) - ENTRY_PARAMS[section])
        flags = set(entry.get("Flags", "").split())
        assert flags <= FLAGS.get(section, set()), (section, flags - FLAGS.get(section, set()))


def test_tasks_offer_a_desktop_icon_and_start_at_login_both_off_by_default() -> None:
    tasks = {entry["Name"]: entry for entry in _entries("Tasks")}
    assert set(tasks) == {"desktopicon", "startatlogin"}
    assert tasks["startatlogin"]["Description"] == "Start PAIR when I log in"
    assert all("unchecked" in task["Flags"].split() for task in tasks.values())
    # Every Tasks: parameter names one of them.
    for section in ("Files", "Icons", "Registry", "Run"):
        for entry in _entries(section):
            assert set(entry.get("Tasks", "").split()) <= set(tasks), (section, entry)


def test_the_whole_one_folder_build_and_the_icon_are_installed() -> None:
    files = _entries("Files")
    frozen = next(entry for entry in files if entry["Source"] == r"{#FrozenDir}\*")
    assert frozen["DestDir"] == "{app}"
    assert {"recursesubdirs", "createallsubdirs", "ignoreversion"} <= set(frozen["Flags"].split())
    icon = next(entry for entry in files if entry["Source"] == "{#IconFile}")
    assert icon["DestName"] == "pair.ico"


def test_the_start_menu_entry_and_the_desktop_icon_start_the_app_with_its_icon() -> None:
    icons = {entry["Name"]: entry for entry in _entries("Icons")}
    assert set(icons) == {r"{autoprograms}\PAIR", r"{autodesktop}\PAIR"}
    for icon in icons.values():
        assert icon["Filename"] == r"{app}\{#AppExe}"
        assert icon["IconFilename"] == r"{app}\pair.ico"
    assert "Tasks" not in icons[r"{autoprograms}\PAIR"]
    assert icons[r"{autodesktop}\PAIR"]["Tasks"] == "desktopicon"


def test_the_login_item_is_the_apps_own_and_the_uninstaller_removes_it() -> None:
    preprocessor, _sections = _iss()
    assert f'#define RunKey "{autostart.RUN_KEY}"' in preprocessor
    registry = _entries("Registry")
    for entry in registry:
        assert entry["Root"] in REGISTRY_ROOTS
        assert entry["ValueType"] in VALUE_TYPES
    run_values = [entry for entry in registry if entry["Subkey"] == "{#RunKey}"]
    assert all(entry["Root"] == "HKCU" for entry in run_values)
    assert all(entry["ValueName"] == autostart.RUN_VALUE_NAME for entry in run_values)
    assert all("uninsdeletevalue" in entry["Flags"].split() for entry in run_values)
    (written,) = (entry for entry in run_values if entry["ValueType"] == "string")
    assert written["Tasks"] == "startatlogin"
    assert written["ValueData"] == r'"{app}\{#AppExe}"'
    # Written by the app's Settings instead: an entry that writes nothing, for the uninstaller.
    (always,) = (entry for entry in run_values if "Tasks" not in entry)
    assert always["ValueType"] == "none"
    assert "dontcreatekey" in always["Flags"].split()


def test_setup_offers_to_start_the_app_when_it_is_done() -> None:
    (run,) = _entries("Run")
    assert run["Filename"] == r"{app}\{#AppExe}"
    assert {"postinstall", "nowait", "skipifsilent"} <= set(run["Flags"].split())


def test_the_uninstaller_deletes_only_the_builds_own_folders() -> None:
    deletes = _entries("UninstallDelete")
    assert all(entry["Type"] in UNINSTALL_DELETE_TYPES for entry in deletes)
    assert {(entry["Type"], entry["Name"]) for entry in deletes} == {
        ("filesandordirs", r"{app}\_internal"),
        ("dirifempty", "{app}"),
    }
    text = ISS.read_text(encoding="utf-8")
    for data in ("{localappdata}", "{userappdata}", "{appdata}", "{commonappdata}"):
        assert data not in text, f"the script names {data}, where user data lives"


def test_every_preprocessor_name_the_script_uses_is_defined() -> None:
    preprocessor, _sections = _iss()
    depth = 0
    for line in preprocessor:
        if re.match(r"#if(n?def|n?exist)?\b", line):
            depth += 1
        elif line.startswith("#endif"):
            depth -= 1
        assert depth >= 0
    assert depth == 0, "every #if has its #endif"
    used = set(re.findall(r"\{#(\w+)\}", ISS.read_text(encoding="utf-8")))
    assert used <= _defines(), used - _defines()
    assert "AppVersion" in _defines()


def _iss_default(name: str) -> Path:
    """Where a ``#define NAME AddBackslash(SourcePath) + "..."`` default points, on this disk."""
    pattern = rf'#define {name} AddBackslash\(SourcePath\) \+ "([^"]+)"'
    (relative,) = (match.group(1) for line in _iss()[0] if (match := re.match(pattern, line)))
    return (ISS.parent / Path(*PureWindowsPath(relative).parts)).resolve()


def test_the_default_paths_are_where_the_build_scripts_write() -> None:
    sys.path.insert(0, str(ROOT / "packaging"))
    try:
        import build_frozen
    finally:
        sys.path.remove(str(ROOT / "packaging"))
    assert _iss_default("FrozenDir") == build_frozen.DEFAULT_DIST / build_frozen.APP_NAME
    assert _iss_default("IconFile") == ROOT / "build" / "icons" / "pair.ico"
    assert _iss_default("OutputDir") == ROOT / "dist"
    ps1 = PS1.read_text(encoding="utf-8")
    assert r'Join-Path $Root "build\icons\pair.ico"' in ps1
    assert r'Join-Path $Root "build\frozen\pair"' in ps1


def _repo_paths(text: str) -> Iterator[str]:
    """The checkout's files a script names: packaging/..., scripts/... (either slash)."""
    for match in re.finditer(
        r"(?:packaging|scripts)[\\/][\w./\\-]+\.(?:py|sh|ps1|iss|spec|plist)", text
    ):
        yield match.group(0).replace("\\", "/")


def test_the_powershell_script_runs_scripts_of_this_checkout() -> None:
    ps1 = PS1.read_text(encoding="utf-8")
    named = set(_repo_paths(ps1))
    assert {
        "packaging/icon_formats.py",
        "packaging/build_frozen.py",
        "packaging/windows/pair.iss",
    } <= named
    for path in named:
        assert (ROOT / path).is_file(), path
    assert '$ErrorActionPreference = "Stop"' in ps1
    assert ps1.count("{") == ps1.count("}")
    # Each /D it passes is a name the .iss takes from outside (#ifndef NAME).
    preprocessor, _sections = _iss()
    takes = {match.group(1) for line in preprocessor if (match := re.match(r"#ifndef (\w+)", line))}
    assert set(re.findall(r'"/D(\w+)=', ps1)) <= takes


# --- macOS -------------------------------------------------------------------------------------


def test_the_macos_script_parses_and_runs_scripts_of_this_checkout() -> None:
    result = subprocess.run(["bash", "-n", str(BUILD_APP)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert BUILD_APP.stat().st_mode & 0o111, "build_app.sh is executable"
    text = BUILD_APP.read_text(encoding="utf-8")
    named = set(_repo_paths(text))
    assert {
        "packaging/icon_formats.py",
        "packaging/pair-macos.spec",
        "packaging/macos/entitlements.plist",
    } <= named
    for path in named:
        assert (ROOT / path).is_file(), path
    assert "hdiutil create -volname PAIR -srcfolder" in text
    assert "-format UDZO" in text
    assert 'DMG="$ROOT/dist/PAIR-$VERSION.dmg"' in text


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_macos_script_passes_shellcheck() -> None:
    result = subprocess.run(["shellcheck", str(BUILD_APP)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_the_entitlements_are_a_property_list() -> None:
    entitlements = plistlib.loads(ENTITLEMENTS.read_bytes())
    assert entitlements == {"com.apple.security.cs.allow-unsigned-executable-memory": True}


class _Target:
    """A stand-in for PyInstaller's Analysis, PYZ, EXE, COLLECT and BUNDLE: records its call."""

    def __init__(self, kind: str, calls: list[_Target], *args: Any, **kwargs: Any) -> None:
        self.kind = kind
        self.args = args
        self.kwargs = kwargs
        calls.append(self)

    def __getattr__(self, name: str) -> list[Any]:
        return []  # a.pure, a.scripts, a.binaries, a.datas...


def test_the_macos_spec_wraps_the_shared_build_in_an_app_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pair.spec imports PyInstaller, which reads the platform as it loads: load it here first.
    pytest.importorskip("PyInstaller.depend.bindepend")
    icns = tmp_path / "pair.icns"
    icns.write_bytes(b"icns\x00\x00\x00\x08")
    monkeypatch.setenv("PAIR_ICNS", str(icns))
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(sys, "path", list(sys.path))
    calls: list[_Target] = []

    def target(kind: str) -> Any:
        return lambda *args, **kwargs: _Target(kind, calls, *args, **kwargs)

    namespace: dict[str, Any] = {
        "__file__": str(MACOS_SPEC),
        "SPEC": str(MACOS_SPEC),
        "SPECPATH": str(MACOS_SPEC.parent),
        **{kind: target(kind) for kind in ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")},
    }
    exec(compile(MACOS_SPEC.read_text(encoding="utf-8"), str(MACOS_SPEC), "exec"), namespace)

    (collect,) = (call for call in calls if call.kind == "COLLECT")
    (bundle,) = (call for call in calls if call.kind == "BUNDLE")
    assert calls[-1] is bundle
    assert bundle.args == (collect,), "the bundle is the one-folder build, not a one-file EXE"
    assert "pair" in {call.kwargs.get("name") for call in collect.args if isinstance(call, _Target)}
    assert bundle.kwargs["name"] == "PAIR.app"
    assert bundle.kwargs["icon"] == str(icns.resolve())
    assert bundle.kwargs["bundle_identifier"] == "org.pair.router"
    assert bundle.kwargs["version"] == __version__
    plist = bundle.kwargs["info_plist"]
    assert plist["CFBundleName"] == "PAIR"
    assert plist["CFBundleShortVersionString"] == __version__
    assert plist["LSUIElement"] is False
    assert plist["LSBackgroundOnly"] is False
    assert plist["NSHighResolutionCapable"] is True
    plistlib.dumps(plist)  # every value is one a property list can hold


def test_the_macos_spec_refuses_other_systems(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    namespace = {"SPECPATH": str(MACOS_SPEC.parent)}
    with pytest.raises(SystemExit, match="macOS"):
        exec(compile(MACOS_SPEC.read_text(encoding="utf-8"), str(MACOS_SPEC), "exec"), namespace)


# --- the workflow ------------------------------------------------------------------------------


def _workflow() -> dict[Any, Any]:
    yaml = pytest.importorskip("yaml")
    document = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    steps = job["steps"]
    assert isinstance(steps, list)
    return steps


def test_the_workflow_runs_on_tags_and_by_hand() -> None:
    workflow = _workflow()
    # YAML 1.1 (PyYAML) reads the key `on` as True.
    triggers = workflow["on"] if "on" in workflow else workflow[True]
    # Tags make a release; other pushes build and smoke-test only (tests/unit/test_ci_workflow.py).
    assert triggers["push"]["tags"] == ["v*"]
    assert "workflow_dispatch" in triggers
    assert workflow["permissions"] == {"contents": "read"}


def test_the_workflow_builds_on_linux_macos_and_windows() -> None:
    jobs = _workflow()["jobs"]
    runners = {name: job["runs-on"] for name, job in jobs.items()}
    assert runners == {
        "linux": "ubuntu-latest",
        "macos": "macos-latest",
        "windows": "windows-latest",
        "release": "ubuntu-latest",
    }
    for name in ("linux", "macos", "windows"):
        steps = _steps(jobs[name])
        setup_python = next(
            step for step in steps if step.get("uses", "").startswith("actions/setup-python@")
        )
        assert setup_python["with"]["python-version"] == "3.11"
        (upload,) = (
            step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@")
        )
        assert upload["with"]["if-no-files-found"] == "error"
    release = jobs["release"]
    assert set(release["needs"]) == {"linux", "macos", "windows"}
    assert release["if"] == "github.ref_type == 'tag'"
    assert release["permissions"] == {"contents": "write"}


def test_the_workflow_runs_the_recipes_and_checks_the_deb() -> None:
    jobs = _workflow()["jobs"]
    runs = {
        name: "\n".join(step.get("run", "") for step in _steps(job)) for name, job in jobs.items()
    }
    assert "python packaging/build_frozen.py" in runs["linux"]
    assert "python packaging/smoke.py build/frozen/pair/pair" in runs["linux"]
    assert "python packaging/deb/build_deb.py" in runs["linux"]
    assert "sudo apt-get install" in runs["linux"]
    assert "lintian" in runs["linux"]
    assert "dpkg-deb -x" in runs["linux"]
    assert "packaging/macos/build_app.sh" in runs["macos"]
    assert "choco install innosetup" in runs["windows"]
    assert "./packaging/windows/build_installer.ps1" in runs["windows"]
    for name, text in runs.items():
        for path in _repo_paths(text):
            assert (ROOT / path).is_file(), (name, path)


def test_every_action_is_pinned_to_a_release() -> None:
    for name, job in _workflow()["jobs"].items():
        for step in _steps(job):
            if "uses" in step:
                action, _, ref = step["uses"].partition("@")
                assert action.startswith("actions/"), (name, action)
                assert re.fullmatch(r"v\d+(\.\d+){0,2}|[0-9a-f]{40}", ref), (name, step["uses"])
