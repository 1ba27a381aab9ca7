// Package sandbox confines the processes run_command starts with the kernel: on Linux
// with Landlock, a command may write only inside the folders its Policy names (the
// workspace and a private temporary folder) and /dev/null; it may read and execute only
// the system's folders (SystemReadable) and what the Policy names; it may connect to no
// TCP port the Policy does not name; paths the Policy hides (luft's state dir and
// config, the user's credentials) are out of its reach even inside a folder it may
// write; and it holds no capability.
//
// Landlock restricts the process that asks for it and everything it starts, for good.
// luft itself must stay unrestricted (it writes its state dir, starts agents, serves a
// daemon), so the rules are applied in the child: Command does not run the program
// directly but re-executes luft's own binary (/proc/self/exe) with a marker argument;
// this package's init sees the marker before anything else of the program runs, applies
// the Policy to that fresh process and then replaces it with the real program (execve
// keeps the rules, and so does every process the program starts). Any binary that links
// this package — luft, and the test binaries of the packages that run commands —
// therefore answers the marker, so no caller needs a hook in its main.
//
// The helper, in order:
//
//  1. runs in a user and mount namespace of its own (the same user, mapped to itself),
//     where it lays an empty read-only tmpfs over each hidden folder and /dev/null on a
//     nodev mount over each hidden file: the command can neither read, change, move nor
//     remove them, and nothing outside the namespace changes. The folders between a
//     granted one and a hidden path are bound onto themselves, so none can be renamed to
//     carry the hidden path away; every UNIX socket bound by path outside the writable
//     folders (/proc/net/unix) gets the same unopenable node. A root luft starts it so
//     directly; another user's luft is not dumpable (Harden), and a user without
//     CAP_SYS_PTRACE cannot write a non-dumpable child's ID maps, so a first helper,
//     dumpable again after its own exec, starts the namespaced one (request.Hop);
//  2. sets RLIMIT_NPROC (counted in its user namespace: the command's processes only;
//     the kernel never applies it to root), RLIMIT_FSIZE and RLIMIT_CORE;
//  3. applies Landlock with go-landlock's best effort on the kernel's ABI: ABI 1–3
//     reads, writes, truncation; ABI 4 TCP connect; ABI 5 device ioctl; ABI 6 signals to
//     and abstract UNIX sockets of processes outside the sandbox. Landlock also refuses a
//     confined process ptrace-level access (/proc/PID/environ, /proc/PID/mem) to any
//     process outside it, unless it holds CAP_SYS_PTRACE;
//  4. sets no_new_privs and drops every capability (bounding, ambient, inheritable,
//     permitted, effective), so a command of a root luft has none either and no setuid
//     program gives one back;
//  5. execs the program.
//
// Check says when this cannot be had: no Landlock, an ABI below MinABI (no TCP rules),
// or a path to hide and no user namespace. Command then refuses, unless the Policy is
// Unconfined: the helper still drops capabilities, sets no_new_privs and the limits.
//
// Landlock judges a write by the path it is made through. A confined command cannot make
// a hard link to an outside file (linking across the rule's boundary is refused), but a
// hard link already in a writable folder before the command starts is written through:
// the outside file changes. The file tools' Guard refuses files with more than one link;
// the sandbox cannot. Connecting to a UNIX socket by path is not covered by Landlock
// before ABI 9, which is why the sockets are covered in the namespace and luft's daemon
// also checks who connects to its socket. UDP is not restricted.
package sandbox
