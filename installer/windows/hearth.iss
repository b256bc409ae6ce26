; Inno Setup script: installs the one-folder app (dist\Hearth, built by PyInstaller from
; installer\hearth.spec) for the current user, with a Start-menu entry and an uninstaller.
;
; On Windows, from the repository root, after the README's set-up (scripts\bootstrap is POSIX;
; on Windows: py -3.11 -m venv .venv, then .venv\Scripts\pip install -e ".[installer]"):
;   .venv\Scripts\python -m PyInstaller --noconfirm --clean --distpath dist --workpath build\pyinstaller installer\hearth.spec
;   "%ProgramFiles(x86)%\Inno Setup 6\ISCC.exe" installer\windows\hearth.iss
; writes dist\Hearth-0.1.0-setup.exe. Not built or run on Windows yet (see installer\README.md).

#define AppName "Hearth"
#define AppVersion "0.1.0"
#define AppId "io.github.hearth.Hearth"
#define AppExe "hearth.exe"
#define Root ".." + "\.."

[Setup]
; A fixed GUID-free id: the reverse-DNS id used everywhere else (upgrades find the old install).
AppId={#AppId}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}
AppPublisher=The Hearth developers
AppPublisherURL=https://github.com/hearth/hearth
; Per user, no administrator rights: {autopf} is %LOCALAPPDATA%\Programs then.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
DefaultDirName={autopf}\{#AppName}
DefaultGroupName={#AppName}
DisableProgramGroupPage=yes
UninstallDisplayName={#AppName}
UninstallDisplayIcon={app}\{#AppExe}
OutputDir={#Root}\dist
OutputBaseFilename=Hearth-{#AppVersion}-setup
SetupIconFile={#Root}\app\assets\{#AppId}.ico
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
; A running Hearth holds its files open: ask to close it first.
CloseApplications=yes
RestartApplications=no

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#Root}\dist\Hearth\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\{#AppName}"; Filename: "{app}\{#AppExe}"; WorkingDir: "{app}"; AppUserModelID: "{#AppId}"; Comment: "Chat with language models on your own computer"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppExe}"; WorkingDir: "{app}"; AppUserModelID: "{#AppId}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExe}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; Files the app writes beside itself (Python caches); the user's models, chats and settings
; (in %LOCALAPPDATA%\hearth) are kept.
Type: filesandordirs; Name: "{app}\_internal\__pycache__"
