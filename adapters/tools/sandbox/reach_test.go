package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// runP runs sh -c script under p in dir, with PATH and env, and returns its combined
// output.
func runP(t *testing.T, p Policy, dir, script string, env ...string) (string, error) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	cmd, err := Command(context.Background(), p, sh, []string{"sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	Done(cmd)
	return out.String(), err
}

func needFull(t *testing.T) {
	t.Helper()
	// As luft's main does, first: the probe for namespaces must work from a process that
	// is not dumpable (a user other than root needs the hop for it).
	Harden()
	if abi := needLandlock(t); abi < MinABI {
		t.Skipf("Landlock ABI %d cannot confine as a policy says (needs %d)", abi, MinABI)
	}
	if err := Namespaces(); err != nil {
		t.Skipf("no user namespaces here: %v", err)
	}
}

// asUser runs the calling test again as an ordinary user (nobody) when the tests run as
// root, so a refusal is proven for both: root's refusals come from dropped capabilities
// and Landlock, an ordinary user's from Landlock and luft's non-dumpable processes.
func asUser(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 || os.Getenv("LUFT_SANDBOX_AS_USER") != "" {
		return
	}
	t.Run("as-nobody", func(t *testing.T) {
		dir := t.TempDir()
		os.Chown(dir, 65534, 65534)
		for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
			os.Chmod(d, 0o755)
		}
		bin := filepath.Join(dir, "sandbox.test")
		src, err := os.Open(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(dst, src)
		src.Close()
		if cerr := dst.Close(); err != nil || cerr != nil {
			t.Fatal(err, cerr)
		}
		name := strings.SplitN(t.Name(), "/", 2)[0]
		cmd := exec.Command(bin, "-test.run=^"+name+"$", "-test.v")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LUFT_SANDBOX_AS_USER=1", "TMPDIR=" + dir, "HOME=" + dir,
			"LUFT_TEST_SECRET=sk-as-user-7f3a"}
		cmd.SysProcAttr = userCred()
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
			t.Fatalf("as nobody: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "--- SKIP: "+name) {
			t.Logf("skipped as nobody:\n%s", out)
		}
	})
}

// TestConfinedReads: outside the system folders, the workspace and what Read names,
// nothing is readable; a hidden path inside the workspace can be neither read, listed,
// changed, moved nor removed, and nothing outside the command's namespace changes.
func TestConfinedReads(t *testing.T) {
	needFull(t)
	base := t.TempDir()
	ws, outside, shared := filepath.Join(base, "ws"), filepath.Join(base, "outside"), filepath.Join(base, "shared")
	state := filepath.Join(ws, ".luft")
	for _, d := range []string{ws, outside, shared, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(outside, "secret"), "outside-secret")
	write(filepath.Join(shared, "lib"), "shared-lib")
	write(filepath.Join(state, "daemon.token"), "token-secret")
	write(filepath.Join(ws, "luft.toml"), "config-secret")
	write(filepath.Join(ws, "code.go"), "package main")
	p := Policy{Write: []string{ws}, Read: []string{shared}, Hide: []string{state, filepath.Join(ws, "luft.toml")}}

	if out, err := runP(t, p, ws, "cat code.go "+shared+"/lib && ls /usr >/dev/null && cat /etc/hostname >/dev/null && echo ok"); err != nil || !strings.Contains(out, "package mainshared-libok") {
		t.Fatalf("allowed reads: %v %q", err, out)
	}
	for _, script := range []string{
		"cat " + outside + "/secret",
		"ls " + outside,
		"cat .luft/daemon.token",
		"ls .luft",
		"cat luft.toml",
		"echo x > luft.toml",
		"echo x > .luft/daemon.token",
		"rm -rf .luft",
		"mv .luft gone",
		"mv luft.toml gone",
		"cat /proc/self/root" + state + "/daemon.token",
		"ln .luft/daemon.token hl && cat hl",
	} {
		out, err := runP(t, p, ws, script)
		if err == nil || strings.Contains(out, "-secret") {
			t.Errorf("%s: succeeded: %q", script, out)
		}
	}
	for path, want := range map[string]string{filepath.Join(state, "daemon.token"): "token-secret", filepath.Join(ws, "luft.toml"): "config-secret"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Fatalf("%s changed: %q %v", path, got, err)
		}
	}
	asUser(t)
}

// TestConfinedProcesses: no confined command reads the environment or memory of the
// process that started it, nor of that one's parent, however it names them — the
// red team's probe, as root and as an ordinary user.
func TestConfinedProcesses(t *testing.T) {
	needFull(t)
	if os.Getenv("LUFT_PROBE_PARENT") == "" {
		// The parent under attack must hold the secret in its initial environment, as
		// luft holds its API keys: start this test again with it there.
		cmd := exec.Command(os.Args[0], "-test.run=^TestConfinedProcesses$", "-test.v")
		cmd.Env = append(os.Environ(), "LUFT_PROBE_PARENT=1", "LUFT_TEST_SECRET=sk-probe-51c0")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestConfinedProcesses") {
			t.Fatalf("probe parent: %v\n%s", err, out)
		}
		asUser(t)
		return
	}
	ws := t.TempDir()
	pid, ppid := os.Getpid(), os.Getppid()
	for _, script := range []string{
		fmt.Sprintf("cat /proc/%d/environ", pid),
		"cat /proc/$PPID/environ",
		fmt.Sprintf("cat /proc/%d/environ", ppid),
		fmt.Sprintf("head -c 4096 /proc/%d/mem", pid),
		fmt.Sprintf("grep -a LUFT_TEST_SECRET /proc/%d/task/*/environ", pid),
		// The chain the red team followed: read our own status, walk PPid up, read each.
		"p=$PPID; for i in 1 2 3; do cat /proc/$p/environ; p=$(awk '/^PPid/ {print $2}' /proc/$p/status); done",
	} {
		out, _ := runP(t, Policy{Write: []string{ws}}, ws, script)
		if strings.Contains(out, "sk-probe-51c0") || strings.Contains(out, "sk-as-user-7f3a") {
			t.Errorf("%s: read the secret:\n%s", script, out)
		}
	}
	// A command has no capability left, even as root.
	out, err := runP(t, Policy{Write: []string{ws}}, ws, "grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status")
	if err != nil {
		t.Fatal(err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasSuffix(line, "0000000000000000") {
			t.Errorf("a confined command holds capabilities: %s", line)
		}
	}
}

// TestConfinedNetwork: no TCP connection unless the policy names the port; binding a
// server of one's own works.
func TestConfinedNetwork(t *testing.T) {
	needFull(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash for /dev/tcp")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello-from-luft\n"))
			c.Close()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ws := t.TempDir()
	connect := fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && head -1 <&3'", port)
	if out, err := runP(t, Policy{Write: []string{ws}}, ws, connect); err == nil || strings.Contains(out, "hello-from-luft") {
		t.Fatalf("connected with no port allowed: %v %q", err, out)
	}
	if out, err := runP(t, Policy{Write: []string{ws}, Ports: []uint16{port + 1}}, ws, connect); err == nil {
		t.Fatalf("connected to a port not allowed: %q", out)
	}
	if out, err := runP(t, Policy{Write: []string{ws}, Ports: []uint16{port}}, ws, connect); err != nil || !strings.Contains(out, "hello-from-luft") {
		t.Fatalf("the allowed port: %v %q", err, out)
	}
	if out, err := runP(t, Policy{Write: []string{ws}, AnyPort: true}, ws, connect); err != nil || !strings.Contains(out, "hello-from-luft") {
		t.Fatalf("any port: %v %q", err, out)
	}
	// An abstract UNIX socket of a process outside is out of reach too (ABI 6).
	if abi, _ := Status(); abi >= 6 {
		name := fmt.Sprintf("@luft-test-%d", os.Getpid())
		ul, err := net.Listen("unix", name)
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		go func() {
			if c, err := ul.Accept(); err == nil {
				c.Write([]byte("abstract-answer\n"))
				c.Close()
			}
		}()
		if py, err := exec.LookPath("python3"); err == nil {
			script := py + ` -c "import socket; s=socket.socket(socket.AF_UNIX); s.connect('\0` + name[1:] + `'); print(s.recv(99))"`
			if out, err := runP(t, Policy{Write: []string{ws}, AnyPort: true}, ws, script); err == nil || strings.Contains(out, "abstract-answer") {
				t.Fatalf("reached an abstract socket outside: %v %q", err, out)
			}
		}
	}
}

// TestConfinedLimits: a fork bomb meets the process cap and a huge file the size cap;
// the host is unharmed and the command fails with the kernel's word for it.
func TestConfinedLimits(t *testing.T) {
	needFull(t)
	ws := t.TempDir()
	out, err := runP(t, Policy{Write: []string{ws}, FileSize: 1 << 20}, ws, "head -c 2000000 /dev/zero > big")
	if err == nil {
		t.Fatalf("a 2 MB file under a 1 MiB cap: %q", out)
	}
	if fi, _ := os.Stat(filepath.Join(ws, "big")); fi == nil || fi.Size() > 1<<20 {
		t.Fatalf("the file grew past the cap: %v", fi)
	}
	// 64 processes at most: a loop that starts 200 sleepers meets the cap (RLIMIT_NPROC
	// for a user, which the kernel does not apply to root; a pids cgroup for root, where
	// one can be made). What the command leaves running dies with it (Done) for root.
	if os.Geteuid() == 0 && pidsBase() == "" {
		t.Log("no pids cgroup can be made here: a root command's processes are not capped")
	} else {
		out, err = runP(t, Policy{Write: []string{ws}, Procs: 64}, ws, "i=0; while [ $i -lt 200 ]; do sleep 30 >/dev/null 2>&1 & i=$((i+1)); done; echo started")
		if !strings.Contains(strings.ToLower(out), "fork") && !strings.Contains(out, "Resource temporarily unavailable") {
			t.Fatalf("200 processes under a cap of 64: %v %q", err, out)
		}
		if os.Geteuid() != 0 {
			exec.Command("pkill", "-u", strconv.Itoa(os.Getuid()), "-f", "^sleep 30$").Run()
		} else if n := countProcs("sleep 30"); n > 0 {
			t.Fatalf("%d of the command's processes outlived it", n)
		}
	}
	asUser(t)
}

// countProcs counts the processes whose command line is cmdline.
func countProcs(cmdline string) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ") == cmdline {
			n++
		}
	}
	return n
}

// TestConfinedHidingHolds: a command cannot carry a hidden path out from under its cover
// by renaming a folder above it (for a later command to read), and no UNIX socket bound
// outside the writable folders answers it (an agent's socket, the session bus, luft's
// daemon), whatever its folder's permissions.
func TestConfinedHidingHolds(t *testing.T) {
	needFull(t)
	base := t.TempDir()
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	state := filepath.Join(ws, "sub", ".luft")
	for _, d := range []string{state, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "daemon.token"), []byte("token-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := Policy{Write: []string{ws}, Hide: []string{state}}
	if out, err := runP(t, p, ws, "mv sub sub2"); err == nil {
		t.Fatalf("renamed the folder above a hidden path: %q", out)
	}
	if out, _ := runP(t, p, ws, "cat sub/.luft/daemon.token sub2/.luft/daemon.token"); strings.Contains(out, "token-secret") {
		t.Fatalf("read the hidden token: %q", out)
	}
	if _, err := os.Stat(filepath.Join(state, "daemon.token")); err != nil {
		t.Fatalf("the state dir moved: %v", err)
	}

	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl to talk to a socket with")
	}
	short, err := os.MkdirTemp("", "ls") // a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(short)
	sock := filepath.Join(short, "agent.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	go http.Serve(ul, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("sock-answer")) }))
	if out, err := exec.Command(curl, "-s", "--unix-socket", sock, "http://x/").CombinedOutput(); err != nil || string(out) != "sock-answer" {
		t.Fatalf("the socket does not answer outside the sandbox: %v %q", err, out)
	}
	if out, err := runP(t, Policy{Write: []string{ws}, AnyPort: true}, ws, curl+" -s --unix-socket "+sock+" http://x/"); err == nil || strings.Contains(out, "sock-answer") {
		t.Fatalf("a confined command reached a socket outside: %v %q", err, out)
	}
	asUser(t)
}
