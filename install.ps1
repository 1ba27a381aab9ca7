# Install luft from a GitHub release (Windows; PowerShell 5.1 or 7, also pwsh on Linux and macOS).
#
#   irm https://raw.githubusercontent.com/luft-run/luft/main/install.ps1 | iex
#   & ([scriptblock]::Create((irm https://raw.githubusercontent.com/luft-run/luft/main/install.ps1))) -Version v1.2.3 -Dir C:\tools\luft
#
# It downloads luft_<os>_<arch>.zip (.tar.gz off Windows) and checksums.txt from the
# release, refuses an archive whose SHA-256 does not match its line in checksums.txt, and
# installs luft.exe into ~\.luft\bin (or -Dir). "latest" is the release GitHub marks as
# latest, reached through its releases/latest/download/ URLs. When the release has no
# archive for this platform it runs `go install github.com/luft-run/luft/cmd/luft@VERSION`
# if Go is installed. It never needs administrator rights.
#
# $env:LUFT_INSTALL_BASE_URL replaces https://github.com/luft-run/luft/releases (a mirror,
# or a local server in tests); files are fetched from BASE/latest/download/FILE or
# BASE/download/vX.Y.Z/FILE.
param(
    [string]$Version = 'latest',
    [string]$Dir = ''
)

# Everything runs inside Install-Luft so that `irm ... | iex` leaves no functions, variables or
# preference changes behind in the caller's session.

function Install-Luft([string]$Version, [string]$Dir) {
    Set-StrictMode -Version 2.0
    $ErrorActionPreference = 'Stop'
    $ProgressPreference = 'SilentlyContinue' # Invoke-WebRequest's progress bar is very slow on 5.1

    $Module = 'github.com/luft-run/luft/cmd/luft'

    function Say([string]$Message) {
        [Console]::Error.WriteLine("luft-install: $Message")
    }

    # Fail stops the install. It throws rather than exits, so that `irm ... | iex` does not close
    # the shell it runs in.
    function Fail([string]$Message) {
        throw "luft-install: error: $Message"
    }

    function Get-Os {
        if ($PSVersionTable.PSVersion.Major -ge 6) {
            if ($IsLinux) { return 'linux' }
            if ($IsMacOS) { return 'darwin' }
        }
        return 'windows'
    }

    function Get-Arch {
        $arch = $null
        try {
            $arch = [System.Runtime.InteropServices.RuntimeInformation]::OSArchitecture.ToString()
        } catch {
            # .NET Framework before 4.7.1 lacks RuntimeInformation; a 32-bit shell on a 64-bit
            # Windows reports its own architecture in PROCESSOR_ARCHITECTURE.
            $arch = $env:PROCESSOR_ARCHITEW6432
            if (-not $arch) { $arch = $env:PROCESSOR_ARCHITECTURE }
        }
        switch -Regex ($arch) {
            '^(X64|AMD64)$' { return 'amd64' }
            '^(Arm64|ARM64)$' { return 'arm64' }
            default { return "$arch".ToLower() }
        }
    }

    # Save-Url downloads $Url to $Path. It returns 'ok', or 'notfound' for HTTP 404; any other
    # failure stops the script with a message.
    function Save-Url([string]$Url, [string]$Path) {
        try {
            Invoke-WebRequest -Uri $Url -OutFile $Path -UseBasicParsing -MaximumRedirection 10
            return 'ok'
        } catch {
            $status = $null
            # WebException (5.1) and HttpResponseException (7) carry the response; a failure to
            # connect has none.
            if ($_.Exception.PSObject.Properties['Response'] -and $null -ne $_.Exception.Response) {
                $status = [int]$_.Exception.Response.StatusCode
            }
            if ($status -eq 404) {
                return 'notfound'
            }
            Fail "downloading $Url failed: $($_.Exception.Message)"
        }
    }

    function Show-PathHint([string]$InstallDir) {
        $sep = [IO.Path]::PathSeparator
        $current = @($env:PATH -split [regex]::Escape($sep)) | ForEach-Object { $_.TrimEnd('\', '/') }
        if ($current -contains $InstallDir.TrimEnd('\', '/')) {
            return
        }
        Say "$InstallDir is not on your PATH; add it for your user with:"
        if ((Get-Os) -eq 'windows') {
            [Console]::Error.WriteLine("  [Environment]::SetEnvironmentVariable('Path', `"$InstallDir;`" + [Environment]::GetEnvironmentVariable('Path', 'User'), 'User')")
            Say 'then open a new terminal.'
        } else {
            [Console]::Error.WriteLine("  `$env:PATH = '$InstallDir$sep' + `$env:PATH")
            Say 'in your $PROFILE, then open a new shell.'
        }
    }

    function Invoke-GoInstall([string]$Reason) {
        $go = Get-Command go -CommandType Application -ErrorAction SilentlyContinue | Select-Object -First 1
        if ($null -eq $go) {
            Fail "$Reason, and Go is not installed to build it: install Go (https://go.dev/dl/) and run this again, or run: go install $Module@$Version"
        }
        Say "$Reason; building it with: go install $Module@$Version"
        New-Item -ItemType Directory -Force -Path $Dir | Out-Null
        $oldGobin = $env:GOBIN
        $env:GOBIN = $Dir
        try {
            & $go.Path install "$Module@$Version"
            if ($LASTEXITCODE -ne 0) {
                Fail "go install $Module@$Version failed (see above)"
            }
        } finally {
            $env:GOBIN = $oldGobin
        }
        Say "installed $(Join-Path $Dir $BinName) (built by Go)"
        Show-PathHint $Dir
    }

    # A version is a tag like v1.2.3 or v1.2.3-rc.1 (1.2.3 is taken as v1.2.3): anything else
    # would end up in a URL and a go install argument.
    if ($Version -match '^[0-9]') {
        $Version = "v$Version"
    }
    if ($Version -ne 'latest' -and $Version -notmatch '^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$') {
        Fail "-Version '$Version' is not a release tag like v1.2.3 (or 'latest')"
    }
    if (-not $Dir) {
        $Dir = Join-Path (Join-Path $HOME '.luft') 'bin'
    }
    $Dir = $ExecutionContext.SessionState.Path.GetUnresolvedProviderPathFromPSPath($Dir)

    $BaseUrl = $env:LUFT_INSTALL_BASE_URL
    if (-not $BaseUrl) {
        $BaseUrl = 'https://github.com/luft-run/luft/releases'
    }
    $BaseUrl = $BaseUrl.TrimEnd('/')
    if ($Version -eq 'latest') {
        $Url = "$BaseUrl/latest/download"
    } else {
        $Url = "$BaseUrl/download/$Version"
    }

    # Windows PowerShell 5.1 may not offer TLS 1.2 by default, and GitHub requires it.
    if ($PSVersionTable.PSVersion.Major -lt 6) {
        [Net.ServicePointManager]::SecurityProtocol = [Net.ServicePointManager]::SecurityProtocol -bor [Net.SecurityProtocolType]::Tls12
    }

    $Os = Get-Os
    $Arch = Get-Arch
    if ($Os -eq 'windows') {
        $Archive = "luft_${Os}_${Arch}.zip"
        $BinName = 'luft.exe'
    } else {
        $Archive = "luft_${Os}_${Arch}.tar.gz"
        $BinName = 'luft'
    }
    if (@('amd64', 'arm64') -notcontains $Arch) {
        Invoke-GoInstall "luft releases have no archive for $Os/$Arch"
        return
    }

    $Tmp = Join-Path ([IO.Path]::GetTempPath()) ("luft-install-" + [Guid]::NewGuid().ToString('N'))
    New-Item -ItemType Directory -Path $Tmp | Out-Null
    try {
        $ArchivePath = Join-Path $Tmp $Archive
        Say "downloading $Url/$Archive"
        if ((Save-Url "$Url/$Archive" $ArchivePath) -eq 'notfound') {
            Invoke-GoInstall "release $Version has no $Archive ($Url/${Archive}: not found)"
            return
        }
        $SumsPath = Join-Path $Tmp 'checksums.txt'
        if ((Save-Url "$Url/checksums.txt" $SumsPath) -ne 'ok') {
            Fail "release $Version has no checksums.txt: refusing to install an unchecked archive"
        }

        $Want = $null
        foreach ($line in Get-Content -LiteralPath $SumsPath) {
            $fields = -split $line
            if ($fields.Count -ge 2 -and ($fields[1] -eq $Archive -or $fields[1] -eq "*$Archive")) {
                $Want = $fields[0].ToLower()
                break
            }
        }
        if (-not $Want) {
            Fail "checksums.txt of release $Version has no entry for ${Archive}: refusing to install an unchecked archive"
        }
        $Got = (Get-FileHash -LiteralPath $ArchivePath -Algorithm SHA256).Hash.ToLower()
        if ($Got -ne $Want) {
            Fail "SHA-256 mismatch for ${Archive}: checksums.txt says $Want, the download is $Got. Nothing was installed; the download may be corrupt or tampered with: try again, and report it if it persists"
        }

        $Unpacked = Join-Path $Tmp 'x'
        New-Item -ItemType Directory -Path $Unpacked | Out-Null
        if ($Archive.EndsWith('.zip')) {
            Expand-Archive -LiteralPath $ArchivePath -DestinationPath $Unpacked -Force
        } else {
            & tar -xzf $ArchivePath -C $Unpacked
            if ($LASTEXITCODE -ne 0) { Fail "cannot unpack $Archive" }
        }
        $Bin = Get-ChildItem -LiteralPath $Unpacked -Recurse -File -Filter $BinName | Select-Object -First 1
        if ($null -eq $Bin) {
            Fail "$Archive has no $BinName"
        }

        New-Item -ItemType Directory -Force -Path $Dir | Out-Null
        $Target = Join-Path $Dir $BinName
        # Windows will not overwrite a running .exe but lets it be renamed: move the old one
        # aside first, then put the new one in its place.
        $Old = "$Target.old"
        if (Test-Path -LiteralPath $Old) {
            Remove-Item -LiteralPath $Old -Force -ErrorAction SilentlyContinue
        }
        if (Test-Path -LiteralPath $Target) {
            Move-Item -LiteralPath $Target -Destination $Old -Force
        }
        Copy-Item -LiteralPath $Bin.FullName -Destination $Target -Force
        if ($Os -ne 'windows') {
            & chmod 755 $Target
        }
        Remove-Item -LiteralPath $Old -Force -ErrorAction SilentlyContinue
        $Installed = (& $Target version | Out-String).Trim()
        Say "installed ${Target}: $Installed"
        Show-PathHint $Dir
    } finally {
        Remove-Item -LiteralPath $Tmp -Recurse -Force -ErrorAction SilentlyContinue
    }
}

Install-Luft -Version $Version -Dir $Dir
