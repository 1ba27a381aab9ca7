#!/bin/sh
# Install luft from a GitHub release (Linux and macOS, amd64 and arm64).
#
#   curl -fsSL https://raw.githubusercontent.com/luft-run/luft/main/install.sh | sh
#   curl -fsSL https://raw.githubusercontent.com/luft-run/luft/main/install.sh | sh -s -- --version v1.2.3 --dir ~/bin
#
# It downloads luft_<os>_<arch>.tar.gz and checksums.txt from the release, refuses an
# archive whose SHA-256 does not match its line in checksums.txt, and installs the luft
# binary into ~/.luft/bin (or --dir). "latest" is the release GitHub marks as latest,
# reached through its releases/latest/download/ URLs. When the release has no archive for
# this platform it runs `go install github.com/luft-run/luft/cmd/luft@VERSION` if Go is
# installed. It never needs root.
#
# LUFT_INSTALL_BASE_URL replaces https://github.com/luft-run/luft/releases (a mirror, or a
# local server in tests); files are fetched from BASE/latest/download/FILE or
# BASE/download/vX.Y.Z/FILE.
set -eu

module=github.com/luft-run/luft/cmd/luft
base_url=${LUFT_INSTALL_BASE_URL:-https://github.com/luft-run/luft/releases}
version=latest
dir=${HOME:?HOME is not set}/.luft/bin
tmp=

say() { printf 'luft-install: %s\n' "$*" >&2; }
die() {
	say "error: $*"
	exit 1
}

usage() {
	cat <<'EOF'
Usage: install.sh [--version vX.Y.Z|latest] [--dir DIR]

Installs luft from a GitHub release into ~/.luft/bin (or DIR), after checking the
archive's SHA-256 against the release's checksums.txt. Falls back to `go install` when the
release has no archive for this platform. Set LUFT_INSTALL_BASE_URL to download from a
mirror instead of https://github.com/luft-run/luft/releases.
EOF
}

# need_arg FLAG VALUE: a flag's value must be present and not another flag.
need_arg() {
	case ${2-} in
	'' | -*) die "$1 needs a value (see --help)" ;;
	esac
}

while [ $# -gt 0 ]; do
	case $1 in
	--version | -v)
		need_arg "$1" "${2-}"
		version=$2
		shift 2
		;;
	--version=*)
		version=${1#--version=}
		shift
		;;
	--dir | -d)
		need_arg "$1" "${2-}"
		dir=$2
		shift 2
		;;
	--dir=*)
		dir=${1#--dir=}
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

# A version is a tag like v1.2.3 or v1.2.3-rc.1 (1.2.3 is taken as v1.2.3): anything else
# would end up in a URL and a go install argument.
case $version in
latest) ;;
[0-9]*) version=v$version ;;
esac
if [ "$version" != latest ]; then
	if ! printf '%s\n' "$version" | grep -Eq '^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'; then
		die "--version '$version' is not a release tag like v1.2.3 (or 'latest')"
	fi
fi
[ -n "$dir" ] || die "--dir is empty"
case $dir in
/*) ;;
*) dir=$(pwd)/$dir ;;
esac

detect_os() {
	case $(uname -s) in
	Linux) echo linux ;;
	Darwin) echo darwin ;;
	*) uname -s | tr '[:upper:]' '[:lower:]' ;;
	esac
}

detect_arch() {
	arch=$(uname -m)
	case $arch in
	x86_64 | amd64)
		# A shell under Rosetta on an Apple silicon Mac sees x86_64; the native build is better.
		if [ "$(uname -s)" = Darwin ] && [ "$(sysctl -n sysctl.proc_translated 2>/dev/null || echo 0)" = 1 ]; then
			echo arm64
		else
			echo amd64
		fi
		;;
	aarch64 | arm64) echo arm64 ;;
	*) echo "$arch" ;;
	esac
}

# fetch URL FILE downloads URL to FILE. Exit status: 0 done, 2 not found (HTTP 404),
# 1 any other failure (said on stderr).
fetch() {
	if command -v curl >/dev/null 2>&1; then
		code=$(curl -sSL --retry 2 --connect-timeout 30 --max-filesize 536870912 -o "$2" -w '%{http_code}' "$1") || {
			say "downloading $1 failed (curl exit $?)"
			return 1
		}
		case $code in
		2??) return 0 ;;
		404) return 2 ;;
		*)
			say "downloading $1 failed: HTTP $code"
			return 1
			;;
		esac
	elif command -v wget >/dev/null 2>&1; then
		if wget -q -S -O "$2" "$1" 2>"$tmp/wget.log"; then
			return 0
		fi
		if grep -q 'HTTP/[0-9.]* 404' "$tmp/wget.log"; then
			return 2
		fi
		say "downloading $1 failed: $(grep 'HTTP/' "$tmp/wget.log" | tail -n 1 | sed 's/^ *//')"
		return 1
	else
		die "neither curl nor wget is installed: install one of them and run this again"
	fi
}

sha256_of() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | cut -d ' ' -f 1
	elif command -v shasum >/dev/null 2>&1; then
		shasum -a 256 "$1" | cut -d ' ' -f 1
	elif command -v openssl >/dev/null 2>&1; then
		openssl dgst -sha256 -r "$1" | cut -d ' ' -f 1
	else
		die "no sha256sum, shasum or openssl to check the download with: install one of them (the archive is not installed unchecked)"
	fi
}

path_hint() {
	case ":${PATH-}:" in
	*":$dir:"*) return 0 ;;
	esac
	say "$dir is not on your PATH; add it with:"
	case ${SHELL-} in
	*/fish)
		printf '  fish_add_path %s\n' "$dir" >&2
		return 0
		;;
	*/zsh) rc=.zshrc ;;
	*/bash) rc=.bashrc ;;
	*) rc=.profile ;;
	esac
	printf "  echo 'export PATH=\"%s:\$PATH\"' >> ~/%s\n" "$dir" "$rc" >&2
	say "then open a new shell (or run: export PATH=\"$dir:\$PATH\")"
}

# go_install REASON: the fallback when no release archive fits this platform.
go_install() {
	if ! command -v go >/dev/null 2>&1; then
		die "$1, and Go is not installed to build it: install Go (https://go.dev/dl/) and run this again, or run: go install $module@$version"
	fi
	say "$1; building it with: go install $module@$version"
	mkdir -p "$dir" || die "cannot create $dir"
	GOBIN=$dir go install "$module@$version" || die "go install $module@$version failed (see above)"
	say "installed $dir/luft (built by $(go version))"
	path_hint
	exit 0
}

os=$(detect_os)
arch=$(detect_arch)
archive=luft_${os}_${arch}.tar.gz
if [ "$version" = latest ]; then
	url=$base_url/latest/download
else
	url=$base_url/download/$version
fi

case $os/$arch in
linux/amd64 | linux/arm64 | darwin/amd64 | darwin/arm64) ;;
mingw* | msys* | cygwin*) die "this is Windows: install with PowerShell instead: irm https://raw.githubusercontent.com/luft-run/luft/main/install.ps1 | iex" ;;
*) go_install "luft releases have no archive for $os/$arch" ;;
esac

tmp=$(mktemp -d 2>/dev/null || mktemp -d -t luft-install) || die "cannot create a temporary directory"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "downloading $url/$archive"
status=0
fetch "$url/$archive" "$tmp/$archive" || status=$?
case $status in
0) ;;
2) go_install "release $version has no $archive ($url/$archive: not found)" ;;
*) die "could not download the luft $version archive (check the version and your network)" ;;
esac
status=0
fetch "$url/checksums.txt" "$tmp/checksums.txt" || status=$?
[ "$status" = 0 ] || die "could not download checksums.txt of release $version: refusing to install an unchecked archive"

want=$(awk -v f="$archive" '$2 == f || $2 == "*" f { print $1; exit }' "$tmp/checksums.txt")
[ -n "$want" ] || die "checksums.txt of release $version has no entry for $archive: refusing to install an unchecked archive"
got=$(sha256_of "$tmp/$archive")
want=$(printf '%s' "$want" | tr '[:upper:]' '[:lower:]')
if [ "$got" != "$want" ]; then
	die "SHA-256 mismatch for $archive: checksums.txt says $want, the download is $got. Nothing was installed; the download may be corrupt or tampered with: try again, and report it if it persists"
fi

mkdir "$tmp/x"
tar -xzf "$tmp/$archive" -C "$tmp/x" || die "cannot unpack $archive"
bin=$tmp/x/luft
if [ ! -f "$bin" ]; then
	# An archive that wraps its files in one folder.
	for f in "$tmp"/x/*/luft; do
		[ -f "$f" ] && bin=$f
	done
fi
[ -f "$bin" ] || die "$archive has no luft binary"

mkdir -p "$dir" || die "cannot create $dir (choose another with --dir)"
# Copy next to the target, then rename over it: a running luft keeps its file, and no
# half-written binary is ever at $dir/luft.
cp "$bin" "$dir/.luft.new.$$" || die "cannot write to $dir (choose another with --dir)"
chmod 755 "$dir/.luft.new.$$"
mv -f "$dir/.luft.new.$$" "$dir/luft" || {
	rm -f "$dir/.luft.new.$$"
	die "cannot replace $dir/luft"
}
say "installed $dir/luft: $("$dir/luft" version 2>&1 || echo "(luft version failed)")"
path_hint
