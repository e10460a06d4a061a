; Inno Setup script of PAIR's Windows installer, dist\PAIR-<version>-setup.exe (Inno Setup 6.3 or
; later; 7 reads it too). See README.md beside it. Usually run by build_installer.ps1, which builds
; the app and the icon first; by hand, after packaging\build_frozen.py and
; packaging\icon_formats.py ico build\icons\pair.ico:
;
;     iscc /DAppVersion=0.1.0 packaging\windows\pair.iss
;
; Defines (/DName=value):
;   AppVersion  required: backend.__version__
;   FrozenDir   the one-folder build (default: build\frozen\pair of this checkout)
;   IconFile    the .ico (default: build\icons\pair.ico of this checkout)
;   OutputDir   where the installer goes (default: dist of this checkout)
;   AppExe      what the shortcuts and the login item start: pairw.exe when the build has one (a
;               windowed twin of pair.exe, no console window), else pair.exe
;
; It installs for the current user (no administrator rights, no UAC prompt) into
; %LOCALAPPDATA%\Programs\PAIR, which is what {autopf} is in that mode. The uninstaller removes
; the program and the login item; PAIR's data (%LOCALAPPDATA%\pair, %APPDATA%) is never touched.

#ifndef AppVersion
  #error Pass the version: iscc /DAppVersion=X.Y.Z packaging\windows\pair.iss
#endif
#ifndef FrozenDir
  #define FrozenDir AddBackslash(SourcePath) + "..\..\build\frozen\pair"
#endif
#ifndef IconFile
  #define IconFile AddBackslash(SourcePath) + "..\..\build\icons\pair.ico"
#endif
#ifndef OutputDir
  #define OutputDir AddBackslash(SourcePath) + "..\..\dist"
#endif
#ifnexist AddBackslash(FrozenDir) + "pair.exe"
  #error No pair.exe in FrozenDir: build the app first (python packaging\build_frozen.py)
#endif
#ifnexist IconFile
  #error No icon at IconFile: python packaging\icon_formats.py ico build\icons\pair.ico
#endif
#ifndef AppExe
  #ifexist AddBackslash(FrozenDir) + "pairw.exe"
    #define AppExe "pairw.exe"
  #else
    #define AppExe "pair.exe"
  #endif
#endif
#define RunKey "Software\Microsoft\Windows\CurrentVersion\Run"

[Setup]
; The AppId names this app to Windows across versions (upgrades, Apps & features): never change it.
AppId={{14F16178-FA89-4CEA-A019-A573D61579F5}
AppName=PAIR
AppVersion={#AppVersion}
AppVerName=PAIR {#AppVersion}
AppPublisher=PAIR
AppComments=Personal AI Router: your computers as one private cluster for local LLMs
DefaultDirName={autopf}\PAIR
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
; The app and every binary PyInstaller collects are 64-bit x86 (they run on Arm64 Windows 11 too).
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
; Qt 6 runs on Windows 10 and later.
MinVersion=10.0
SetupIconFile={#IconFile}
UninstallDisplayIcon={app}\pair.ico
UninstallDisplayName=PAIR
OutputDir={#OutputDir}
OutputBaseFilename=PAIR-{#AppVersion}-setup
Compression=lzma2
SolidCompression=yes
WizardStyle=modern
; A running PAIR (the app, its broker and workers are all pair.exe) is asked to close before
; its files are replaced or removed.
CloseApplications=yes

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked
Name: "startatlogin"; Description: "Start PAIR when I log in"; GroupDescription: "Startup:"; Flags: unchecked

[Files]
Source: "{#FrozenDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs
Source: "{#IconFile}"; DestDir: "{app}"; DestName: "pair.ico"; Flags: ignoreversion

[Icons]
Name: "{autoprograms}\PAIR"; Filename: "{app}\{#AppExe}"; WorkingDir: "{app}"; IconFilename: "{app}\pair.ico"; Comment: "Personal AI Router"
Name: "{autodesktop}\PAIR"; Filename: "{app}\{#AppExe}"; WorkingDir: "{app}"; IconFilename: "{app}\pair.ico"; Comment: "Personal AI Router"; Tasks: desktopicon

[Registry]
; The login item is the same value the app's Settings (Start PAIR when I log in) write and remove
; (app/autostart.py): HKCU\...\Run\PAIR. Written here only for the task; with ValueType none (no
; value is written) and dontcreatekey the first entry exists for uninsdeletevalue alone, so the
; uninstaller removes the value whoever wrote it and Windows is not left starting a deleted file.
Root: HKCU; Subkey: "{#RunKey}"; ValueType: none; ValueName: "PAIR"; Flags: dontcreatekey uninsdeletevalue
Root: HKCU; Subkey: "{#RunKey}"; ValueType: string; ValueName: "PAIR"; ValueData: """{app}\{#AppExe}"""; Flags: uninsdeletevalue; Tasks: startatlogin

[Run]
Filename: "{app}\{#AppExe}"; Description: "{cm:LaunchProgram,PAIR}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; The uninstaller deletes the files it installed but not the folders recursesubdirs made: remove
; the build's own folder whole (PyInstaller's layout, nothing of the user's is in it), then {app}
; if nothing else is left. Never a wildcard over {app}: the user may have picked a folder of theirs.
Type: filesandordirs; Name: "{app}\_internal"
Type: dirifempty; Name: "{app}"
