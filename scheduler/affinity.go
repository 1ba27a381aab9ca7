package scheduler

import (
	"github.com/luft-run/luft/agent"
)

// conv is where a conversation's last turn ran: affinity follows the conversation (an
// agent call or a session), not the run, so the calls of a fan-out each keep their own
// replica (SPEC §7). A run's conversations are forgotten with the run.
type conv struct {
	lane    *lane
	replica int
}

func (r *runState) conv(name string) *conv {
	cv := r.convs[name]
	if cv == nil {
		cv = &conv{replica: -1}
		r.convs[name] = cv
	}
	return cv
}

// affineScan bounds how many queued turns affine looks at.
const affineScan = 32

// affine returns a turn to admit in place of l's best turn j, or nil. When j is batch
// work of a conversation whose previous replica on t cannot take it now (full, or loaded
// past AffinityBound), its turn would land on replica r and lose its KV cache; if a batch
// turn of the same caller whose conversation last ran on r is ranked within AffinityWindow of j,
// that turn takes r's slot instead and j keeps its place at the head, so it gets the
// next slot its own replica frees (or, failing that, any slot). Only j's caller's heap
// is searched, pruned at the window and capped at affineScan turns, so the cost stays
// bounded and the fair shares across callers are untouched.
func (c *Core) affine(l, t *lane, j *job) *job {
	if c.cfg.AffinityBound < 0 || c.cfg.AffinityWindow <= 0 || len(t.replicas) < 2 ||
		j.Class != agent.ClassBatch || j.conv.lane != t || j.conv.replica < 0 {
		return nil
	}
	prev := j.conv.replica
	r := t.pickReplica(prev, c.cfg.AffinityBound)
	if r == prev || r < 0 {
		return nil
	}
	cl := l.callers[j.Caller]
	if cl == nil {
		return nil
	}
	limit := j.key + int64(c.cfg.AffinityWindow)
	h := cl.jobs.s
	var best *job
	stack := [affineScan]int{0}
	sp, seen := 1, 0
	for sp > 0 && seen < affineScan {
		sp--
		i := stack[sp]
		x := h[i]
		seen++
		if x != j && x.Class == agent.ClassBatch && x.conv.lane == t && x.conv.replica == r &&
			(best == nil || x.key < best.key || (x.key == best.key && x.seq < best.seq)) {
			best = x
		}
		for _, k := range [2]int{2*i + 1, 2*i + 2} {
			if k < len(h) && h[k].key <= limit && sp < affineScan {
				stack[sp] = k
				sp++
			}
		}
	}
	if best == nil || t.pickReplica(r, c.cfg.AffinityBound) != r {
		return nil
	}
	return best
}

// pickReplica chooses the replica for a turn of a run last served on prev (-1 = none):
// prev while it has a free slot and carries at most bound more turns than the least
// loaded replica (its KV cache is worth a little imbalance, not an overload), else the
// least-loaded replica with a free slot.
func (l *lane) pickReplica(prev, bound int) int {
	best, least := -1, -1
	for r, n := range l.replicas {
		if least < 0 || n < l.replicas[least] {
			least = r
		}
		if l.cfg.Slots > 0 && n >= l.cfg.Slots {
			continue
		}
		if best < 0 || n < l.replicas[best] {
			best = r
		}
	}
	if bound >= 0 && prev >= 0 && prev < len(l.replicas) {
		n := l.replicas[prev]
		if (l.cfg.Slots <= 0 || n < l.cfg.Slots) && n-l.replicas[least] <= bound {
			return prev
		}
	}
	return best
}
