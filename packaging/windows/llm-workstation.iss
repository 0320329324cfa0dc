; Inno Setup 6 script: a per-user (or all-users) installer for the PyInstaller bundle.
;
;   python packaging\build_bundle.py                       (makes dist\llm-workstation\)
;   iscc /DAppVersion=0.1.0 packaging\windows\llm-workstation.iss
;
; Output: dist\llm-workstation-<version>-setup.exe. Paths below are relative to this file (SourcePath).

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
#define AppName "LLM Workstation"
#define AppExeName "llm-workstation.exe"
#define BundleDir "..\..\dist\llm-workstation"

[Setup]
; A fixed GUID: upgrades replace the installed version instead of installing beside it. Never change it.
AppId={{6F2C8E4A-3B71-4D2F-9A5E-1C7B0D84E2F3}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}
AppPublisher=The LLM Workstation developers
AppPublisherURL=https://github.com/llmworkstation/llm-workstation
DefaultDirName={autopf}\{#AppName}
DefaultGroupName={#AppName}
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename=llm-workstation-{#AppVersion}-setup
SetupIconFile=llm-workstation.ico
; The MIT licence: shown on the licence page (the bundle carries it as _internal\LICENSE too)
LicenseFile=..\..\LICENSE
UninstallDisplayIcon={app}\{#AppExeName}
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#BundleDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\{#AppName}"; Filename: "{app}\{#AppExeName}"; AppUserModelID: "io.github.llmworkstation.LLMWorkstation"
Name: "{group}\Uninstall {#AppName}"; Filename: "{uninstallexe}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppExeName}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExeName}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; The app's chats, settings and models live in the user's AppData folders and are kept on purpose.
Type: filesandordirs; Name: "{app}\_internal"
