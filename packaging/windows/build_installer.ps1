<#
.SYNOPSIS
Builds PAIR's Windows installer, dist\PAIR-<version>-setup.exe (see README.md beside this file).

.DESCRIPTION
1. writes build\icons\pair.ico (packaging\icon_formats.py);
2. builds the one-folder app into build\frozen\pair (packaging\build_frozen.py) and runs its
   pair.exe --version;
3. compiles packaging\windows\pair.iss with Inno Setup's ISCC.exe.

Run it from any folder with the Python of PAIR's environment (the `dev` extra: PyInstaller).

.PARAMETER Python
The Python of PAIR's environment (default: python from PATH).

.PARAMETER Iscc
ISCC.exe (default: from PATH, else the newest "Inno Setup *" folder under Program Files or
%LOCALAPPDATA%\Programs).

.EXAMPLE
powershell -ExecutionPolicy Bypass -File packaging\windows\build_installer.ps1 -Python .venv\Scripts\python.exe
#>
[CmdletBinding()]
param(
    [string]$Python = "python",
    [string]$Iscc = ""
)

$ErrorActionPreference = "Stop"
Set-StrictMode -Version Latest

if ([System.Environment]::OSVersion.Platform -ne "Win32NT") {
    throw "build_installer.ps1 builds a Windows installer: run it on Windows"
}

$Root = (Resolve-Path (Join-Path $PSScriptRoot "..\..")).Path
Set-Location $Root

function Invoke-Native {
    # Run a program; stop with its exit code when it fails (native programs do not throw).
    param([Parameter(Mandatory)][string]$Program, [string[]]$Arguments = @())
    & $Program @Arguments
    if ($LASTEXITCODE -ne 0) {
        throw "$Program $($Arguments -join ' ') failed with exit code $LASTEXITCODE"
    }
}

function Find-Iscc {
    $command = Get-Command "iscc.exe" -ErrorAction SilentlyContinue
    if ($command) {
        return $command.Source
    }
    $folders = @(${env:ProgramFiles(x86)}, $env:ProgramFiles, (Join-Path $env:LOCALAPPDATA "Programs"))
    foreach ($folder in ($folders | Where-Object { $_ -and (Test-Path $_) })) {
        $found = Get-ChildItem -Path $folder -Directory -Filter "Inno Setup*" -ErrorAction SilentlyContinue |
            Sort-Object Name -Descending |
            ForEach-Object { Join-Path $_.FullName "ISCC.exe" } |
            Where-Object { Test-Path $_ } |
            Select-Object -First 1
        if ($found) {
            return $found
        }
    }
    throw "ISCC.exe (Inno Setup 6.3 or later) not found: install Inno Setup (choco install innosetup) or pass -Iscc"
}

$Version = (& $Python -c "import backend; print(backend.__version__)" | Out-String).Trim()
if ($LASTEXITCODE -ne 0 -or -not $Version) {
    throw "$Python cannot import PAIR's backend: run this with the Python of PAIR's environment"
}
Write-Host "== PAIR $Version"

# The icon first: the shortcuts, the uninstaller entry and Setup itself show it.
$Icon = Join-Path $Root "build\icons\pair.ico"
Invoke-Native $Python @("packaging\icon_formats.py", "ico", $Icon)

$Frozen = Join-Path $Root "build\frozen\pair"
Invoke-Native $Python @("packaging\build_frozen.py")
Invoke-Native (Join-Path $Frozen "pair.exe") @("--version")

if (-not $Iscc) {
    $Iscc = Find-Iscc
}
$Dist = Join-Path $Root "dist"
Invoke-Native $Iscc @(
    "/Qp",
    "/DAppVersion=$Version",
    "/DFrozenDir=$Frozen",
    "/DIconFile=$Icon",
    "/DOutputDir=$Dist",
    (Join-Path $Root "packaging\windows\pair.iss")
)

$Setup = Join-Path $Dist "PAIR-$Version-setup.exe"
if (-not (Test-Path $Setup)) {
    throw "ISCC left no $Setup"
}
$Megabytes = [math]::Round((Get-Item $Setup).Length / 1MB, 1)
Write-Host "installer: $Setup ($Megabytes MiB)"
