package adapters

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/luft-run/luft/agent"
	openai "github.com/sashabaranov/go-openai"
)

// turnReply is what one model turn answered: its message, the model that served it, the
// usage and why it stopped.
type turnReply struct {
	msg    openai.ChatCompletionMessage
	model  string
	usage  agent.Usage
	finish openai.FinishReason
}

// plainTurn is one non-streamed completion.
func (o *OpenAI) plainTurn(ctx context.Context, cp *capture, creq openai.ChatCompletionRequest) (turnReply, error) {
	cl, base, model := o.target(ctx, creq.Model)
	creq.Model = model
	o.outputCap(cp, &creq, base)
	resp, err := cl.CreateChatCompletion(context.WithValue(ctx, captureKey{}, cp), creq)
	if err != nil {
		return turnReply{}, o.wrapErrAt(ctx, base, cp, err)
	}
	r := turnReply{model: resp.Model, usage: usageOf(resp.Usage)}
	if len(resp.Choices) == 0 {
		return r, fmt.Errorf("openai backend %q: the endpoint %s answered with no choices", o.cfg.ID, o.cfg.BaseURL)
	}
	r.msg, r.finish = resp.Choices[0].Message, resp.Choices[0].FinishReason
	return r, nil
}

// streamTurn is one streamed completion: text is reported as it arrives, tool-call
// fragments are put together by index. Usage comes in the last chunk (stream_options
// include_usage); an endpoint that sends none gets an estimate.
func (o *OpenAI) streamTurn(ctx context.Context, cp *capture, creq openai.ChatCompletionRequest, call Call) (turnReply, error) {
	creq.Stream = true
	creq.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	cl, base, target := o.target(ctx, creq.Model)
	creq.Model = target
	o.outputCap(cp, &creq, base)
	st, err := cl.CreateChatCompletionStream(context.WithValue(ctx, captureKey{}, cp), creq)
	if err != nil {
		return turnReply{}, o.wrapErrAt(ctx, base, cp, err)
	}
	defer st.Close()
	// The headers are here before the reply: the scheduler learns the limits now.
	ObserveHeaders(ctx, cp.header)
	var sr streamed
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return turnReply{model: sr.model}, o.wrapErrAt(ctx, base, cp, err)
			}
			// The connection broke after a 200: a transport failure the scheduler retries.
			return turnReply{model: sr.model}, &HTTPError{Status: 0, Headers: cp.header, BaseURL: base, Message: "stream broken: " + err.Error()}
		}
		sr.add(chunk, call)
	}
	return sr.reply(creq), nil
}

// streamed is a streamed reply as far as its chunks have come.
type streamed struct {
	text   strings.Builder
	calls  []openai.ToolCall
	model  string
	usage  *openai.Usage
	finish openai.FinishReason
}

// add folds one chunk in: its text, reported as it arrives, and its tool-call
// fragments, put together by index.
func (sr *streamed) add(chunk openai.ChatCompletionStreamResponse, call Call) {
	if chunk.Model != "" {
		sr.model = chunk.Model
	}
	if chunk.Usage != nil {
		sr.usage = chunk.Usage
	}
	for _, ch := range chunk.Choices {
		if ch.FinishReason != "" && ch.FinishReason != openai.FinishReasonNull {
			sr.finish = ch.FinishReason
		}
		if ch.Delta.Content != "" {
			sr.text.WriteString(ch.Delta.Content)
			call.Report(Update{Kind: "text", Text: ch.Delta.Content})
		}
		for _, d := range ch.Delta.ToolCalls {
			i := len(sr.calls)
			if d.Index != nil {
				i = *d.Index
			}
			for len(sr.calls) <= i {
				sr.calls = append(sr.calls, openai.ToolCall{Type: openai.ToolTypeFunction})
			}
			c := &sr.calls[i]
			if d.ID != "" {
				c.ID = d.ID
			}
			if d.Function.Name != "" {
				c.Function.Name += d.Function.Name
			}
			c.Function.Arguments += d.Function.Arguments
		}
	}
}

// reply is the whole streamed reply to creq; without usage from the endpoint, the
// usage is estimated.
func (sr *streamed) reply(creq openai.ChatCompletionRequest) turnReply {
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: sr.text.String(), ToolCalls: sr.calls}
	var u agent.Usage
	if sr.usage != nil {
		u = usageOf(*sr.usage)
	} else {
		u = agent.Usage{Input: estimateMessages(creq.Messages, creq.Tools), Output: EstimateTokens(msg.Content)}
	}
	return turnReply{msg: msg, model: sr.model, usage: u, finish: sr.finish}
}

func usageOf(u openai.Usage) agent.Usage {
	out := agent.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
	if d := u.PromptTokensDetails; d != nil {
		out.Cached = d.CachedTokens
	}
	return out
}
