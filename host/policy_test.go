package host

import (
	"testing"
	"time"

	"github.com/luft-run/luft/config"
)

func TestSchedulerConfigFromConfigFile(t *testing.T) {
	cfg, err := config.Parse("luft.toml", []byte(`
[backends.local]
type = "mock"
model = "m1"
max_concurrency = 2
tpm = 1000
rpm = 60
replicas = ["http://127.0.0.1:1/v1"]
fallback = "spare"
[backends.spare]
type = "mock"
[scheduler]
slots = 5
suspend_after = "90s"
`))
	if err != nil {
		t.Fatal(err)
	}
	sc := SchedulerConfig(cfg, 8, false)
	if sc.DefaultLane.Slots != 5 || sc.SuspendAfter != 90*time.Second {
		t.Fatalf("defaults from [scheduler]: %+v", sc)
	}
	l := sc.Lanes["local/m1"]
	if l.Slots != 2 || l.TPM != 1000 || l.RPM != 60 || l.Replicas != 2 || l.Fallback != "spare/" {
		t.Fatalf("lane local/m1: %+v", l)
	}
	if sc.Lanes["spare/"].Slots != 5 {
		t.Fatalf("lane spare/: %+v", sc.Lanes["spare/"])
	}
	// --max-concurrency beats the file.
	if sc := SchedulerConfig(cfg, 3, true); sc.DefaultLane.Slots != 3 {
		t.Fatalf("flag slots: %+v", sc.DefaultLane)
	}
}
