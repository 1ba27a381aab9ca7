package mcp

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Over stdio, mcp-go writes a notification from a goroutine of its own, fed by a
// channel, while a tool's response is written by the worker that ran the tool: a
// progress notification sent just before a tool returned could reach the client after
// the tool's result, which clients treat as a protocol error (the request is over).
// progressOrder keeps them in order: it counts the progress notifications sent on the
// stdio session and those written out, and a tool's result waits until every one sent
// before it is written.
type progressOrder struct {
	sent, written atomic.Int64

	mu    sync.Mutex
	wrote chan struct{} // closed (and replaced) after each progress line is written
}

func newProgressOrder() *progressOrder { return &progressOrder{wrote: make(chan struct{})} }

// next is the channel closed when the next progress line is written.
func (o *progressOrder) next() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.wrote
}

type progressOrderKey struct{}

func withProgressOrder(ctx context.Context, o *progressOrder) context.Context {
	return context.WithValue(ctx, progressOrderKey{}, o)
}

func progressOrderOf(ctx context.Context) *progressOrder {
	o, _ := ctx.Value(progressOrderKey{}).(*progressOrder)
	return o
}

// progressLine starts a progress notification as mcp-go marshals it.
var progressLine = []byte(`{"jsonrpc":"2.0","method":"notifications/progress"`)

// wroteLine counts line, just written, when it is a progress notification.
func (o *progressOrder) wroteLine(line []byte) {
	if o == nil || !bytes.HasPrefix(line, progressLine) {
		return
	}
	o.mu.Lock()
	o.written.Add(1)
	close(o.wrote)
	o.wrote = make(chan struct{})
	o.mu.Unlock()
}

// maxProgressDrain bounds how long a result waits for the progress sent before it: a
// stuck writer must not hold the result for ever.
const maxProgressDrain = 5 * time.Second

// drain waits until every progress notification sent so far is written.
func (o *progressOrder) drain(ctx context.Context) {
	if o == nil || o.written.Load() >= o.sent.Load() {
		return
	}
	limit := time.NewTimer(maxProgressDrain)
	defer limit.Stop()
	for {
		wrote := o.next()
		if o.written.Load() >= o.sent.Load() {
			return
		}
		select {
		case <-wrote:
		case <-limit.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
