// Package sandbox confines the processes run_command starts with the kernel: on Linux
// with Landlock, a command may write only inside the folders its Policy names (the
// workspace and a private temporary folder) and /dev/null; it may read and execute
// what luft's user can.
//
// Landlock restricts the process that asks for it and everything it starts, for good.
// luft itself must stay unrestricted (it writes its state dir, starts agents, serves a
// daemon), so the rules are applied in the child: Command does not run the program
// directly but re-executes luft's own binary (/proc/self/exe) with a marker argument;
// this package's init sees the marker before anything else of the program runs, applies
// the Policy's rules to that fresh process and then replaces it with the real program
// (execve keeps the rules, and so does every process the program starts). Any binary
// that links this package — luft, and the test binaries of the packages that run
// commands — therefore answers the marker, so no caller needs a hook in its main.
//
// What the rules cover, with go-landlock's best-effort mode on the kernel's ABI:
//
//   - ABI 1 and up: creating, writing, removing and renaming files and folders outside
//     the writable folders is refused (EACCES/EPERM), whoever asks — the program, a
//     script it runs, a test binary under `go test`, a git hook;
//   - ABI 3: truncating files outside them too; ABI 5: ioctl on devices;
//   - ABI 6: signals to processes outside the sandbox (luft among them) and abstract
//     UNIX sockets of outside processes are refused;
//   - ABI 9: connecting to UNIX sockets outside (a docker or ssh-agent socket).
//
// Reading stays open: an allowed command can read what luft's user can read (ls or cat
// of a path outside the workspace works). TCP networking is not restricted. The rules
// are set with no_new_privs, so no setuid program can shed them.
//
// Landlock judges a write by the path it is made through. A confined command cannot make
// a hard link to an outside file (linking across the rule's boundary is refused), but a
// hard link already in a writable folder before the command starts is written through:
// the outside file changes. The file tools' Guard refuses files with more than one link;
// the sandbox cannot.
//
// Kernels without Landlock (before 5.13, or with it disabled at boot) and other systems
// cannot confine: Status says why, and commands then run unconfined — the allow-list and
// the minimal environment are all that stands between a command and the user's files.
// luft warns once per process when commands are allowed and cannot be confined.
package sandbox
