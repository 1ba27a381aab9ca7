package storage

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

const runColumns = `id, workflow, script_hash, status, error, args_json, report_json, has_report,
	input_tokens, output_tokens, cached_tokens, cost, agents_ok, agents_failed, agents_cached,
	agents_cancelled, attempt, pid, created_at, updated_at, finished_at, resume_after, cancel_requested, spec_json,
	node, lease_until, workspace`

// jsonArg stores nil as NULL and anything else as TEXT, after checking it is JSON.
func jsonArg(field string, raw json.RawMessage) (any, error) {
	if raw == nil {
		return nil, nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("%s is not valid JSON", field)
	}
	return string(raw), nil
}

func validStatus(s string) bool {
	switch s {
	case StatusQueued, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled, StatusSuspended:
		return true
	}
	return false
}

// CreateRun implements Store.
func (s *sqlStore) CreateRun(ctx context.Context, r Run) error {
	fn, err := s.createOp(r)
	if err != nil {
		return err
	}
	return s.write(ctx, fn)
}

// createOp checks r and returns the writer's op that creates it (see CreateRun).
func (s *sqlStore) createOp(r Run) (func(tx *wtx) error, error) {
	if r.ID == "" {
		return nil, errors.New("storage: create run: empty id")
	}
	if r.Status == "" {
		r.Status = StatusRunning
	}
	if !validStatus(r.Status) {
		return nil, fmt.Errorf("storage: create run %s: unknown status %q", r.ID, r.Status)
	}
	if r.Attempt <= 0 {
		r.Attempt = 1
	}
	if !s.storable(r.Workspace) {
		return nil, fmt.Errorf("storage: create run %s: workspace %q holds a NUL byte or invalid UTF-8", r.ID, r.Workspace)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.now()
	}
	args, err := jsonArg("args", r.Args)
	if err != nil {
		return nil, errf("create run", r.ID, err)
	}
	var report any
	if r.HasReport {
		if report, err = jsonArg("report", r.Report); err != nil {
			return nil, errf("create run", r.ID, err)
		}
	}
	spec, err := jsonArg("spec", r.Spec)
	if err != nil {
		return nil, errf("create run", r.ID, err)
	}
	created := fmtTime(r.CreatedAt)
	return func(tx *wtx) error {
		var n int
		if err := tx.QueryRow(`SELECT COUNT(*) FROM runs WHERE id = ?`, r.ID).Scan(&n); err != nil {
			return errf("create run", r.ID, err)
		}
		if n > 0 {
			return errf("create run", r.ID, ErrRunExists)
		}
		_, err := tx.Exec(`INSERT INTO runs (`+runColumns+`) VALUES
			(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, s.bin(r.Workflow), r.ScriptHash, r.Status, s.bin(r.Error), s.bin(args), s.bin(report), r.HasReport,
			r.Usage.Input, r.Usage.Output, r.Usage.Cached, r.Cost, r.Agents.OK, r.Agents.Failed, r.Agents.Cached,
			r.Agents.Cancelled, r.Attempt, r.PID, created, created, nullTime(r.FinishedAt), nullTime(r.ResumeAfter),
			r.CancelRequested, s.bin(spec), r.Node, nullTime(r.LeaseUntil), r.Workspace)
		if pgCode(err) == pgUniqueViolation {
			return errf("create run", r.ID, ErrRunExists) // created by another process since the count
		}
		if err != nil {
			return errf("create run", r.ID, err)
		}
		return nil
	}, nil
}

// UpdateRun implements Store.
func (s *sqlStore) UpdateRun(ctx context.Context, id string, u RunUpdate) error {
	fn, err := s.updateOp(ctx, id, u)
	if err != nil {
		return err
	}
	return s.write(ctx, fn)
}

// updateOp checks u and returns the writer's op that applies it (see UpdateRun).
func (s *sqlStore) updateOp(ctx context.Context, id string, u RunUpdate) (func(tx *wtx) error, error) {
	var sets []string
	var args []any
	set := func(col string, v any) {
		sets = append(sets, col+" = ?")
		args = append(args, v)
	}
	if u.Status != nil {
		if !validStatus(*u.Status) {
			return nil, fmt.Errorf("storage: update run %s: unknown status %q", id, *u.Status)
		}
		set("status", *u.Status)
	}
	if u.Error != nil {
		set("error", s.bin(*u.Error))
	}
	if u.ScriptHash != nil {
		set("script_hash", *u.ScriptHash)
	}
	hasReport := u.Report != nil
	if u.HasReport != nil {
		hasReport = *u.HasReport
	}
	switch {
	case hasReport && u.Report != nil:
		v, err := jsonArg("report", *u.Report)
		if err != nil {
			return nil, errf("update run", id, err)
		}
		set("report_json", s.bin(v))
		set("has_report", true)
	case hasReport: // HasReport true without a value keeps the stored value
		set("has_report", true)
	case u.HasReport != nil: // explicitly false
		set("report_json", nil)
		set("has_report", false)
	}
	if u.Usage != nil {
		set("input_tokens", u.Usage.Input)
		set("output_tokens", u.Usage.Output)
		set("cached_tokens", u.Usage.Cached)
	}
	if u.Cost != nil {
		set("cost", *u.Cost)
	}
	if u.Agents != nil {
		set("agents_ok", u.Agents.OK)
		set("agents_failed", u.Agents.Failed)
		set("agents_cached", u.Agents.Cached)
		set("agents_cancelled", u.Agents.Cancelled)
	}
	if u.Attempt != nil {
		set("attempt", *u.Attempt)
	}
	if u.PID != nil {
		set("pid", *u.PID)
	}
	if u.Node != nil {
		set("node", *u.Node)
	}
	if u.LeaseUntil != nil {
		set("lease_until", nullTime(*u.LeaseUntil))
	}
	if u.Workspace != nil {
		if !s.storable(*u.Workspace) {
			return nil, fmt.Errorf("storage: update run %s: workspace %q holds a NUL byte or invalid UTF-8", id, *u.Workspace)
		}
		set("workspace", *u.Workspace)
	}
	if u.FinishedAt != nil {
		set("finished_at", nullTime(*u.FinishedAt))
	}
	if u.ResumeAfter != nil {
		set("resume_after", nullTime(*u.ResumeAfter))
	}
	if u.CancelRequested != nil {
		set("cancel_requested", *u.CancelRequested)
	}
	if u.Spec != nil {
		v, err := jsonArg("spec", *u.Spec)
		if err != nil {
			return nil, errf("update run", id, err)
		}
		set("spec_json", s.bin(v))
	}
	set("updated_at", fmtTime(s.now()))
	args = append(args, id)
	q := `UPDATE runs SET ` + strings.Join(sets, ", ") + ` WHERE id = ?`
	if u.IfAttempt != nil {
		q += ` AND attempt = ?`
		args = append(args, *u.IfAttempt)
	}
	if u.IfWorkspace != nil {
		q += ` AND workspace = ?`
		args = append(args, *u.IfWorkspace)
	}
	if u.IfStatus != nil {
		q += ` AND status = ?`
		args = append(args, *u.IfStatus)
	}
	fence := fenceFor(ctx, id)
	return func(tx *wtx) error {
		if err := tx.checkFence("update run", fence); err != nil {
			return err
		}
		err := execOne(tx, "update run", id, q, args...)
		if u.Attempt != nil {
			delete(tx.fenced, id) // a claim: later fenced writes in this transaction check again
		}
		if (u.IfAttempt != nil || u.IfWorkspace != nil || u.IfStatus != nil) && errors.Is(err, ErrRunNotFound) {
			var n int
			if tx.QueryRow(`SELECT COUNT(*) FROM runs WHERE id = ?`, id).Scan(&n) == nil && n == 1 {
				return errf("update run", id, ErrRunChanged)
			}
		}
		return err
	}, nil
}

// execOne runs a statement that must change exactly one run; none is ErrRunNotFound.
func execOne(tx *wtx, what, id, q string, args ...any) error {
	res, err := tx.Exec(q, args...)
	if err != nil {
		return errf(what, id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errf(what, id, ErrRunNotFound)
	}
	return nil
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanRun(sc scanner) (Run, error) {
	var r Run
	var created, updated string
	var finished, resume, lease sql.NullString
	var args, report, spec []byte
	err := sc.Scan(&r.ID, &r.Workflow, &r.ScriptHash, &r.Status, &r.Error, &args, &report, &r.HasReport,
		&r.Usage.Input, &r.Usage.Output, &r.Usage.Cached, &r.Cost, &r.Agents.OK, &r.Agents.Failed, &r.Agents.Cached,
		&r.Agents.Cancelled, &r.Attempt, &r.PID, &created, &updated, &finished, &resume, &r.CancelRequested, &spec,
		&r.Node, &lease, &r.Workspace)
	if err != nil {
		return Run{}, err
	}
	r.Args, r.Report, r.Spec = raw(args), raw(report), raw(spec)
	var errs [5]error
	r.CreatedAt, errs[0] = parseTime(created)
	r.UpdatedAt, errs[1] = parseTime(updated)
	r.FinishedAt, errs[2] = parseNullTime(finished)
	r.ResumeAfter, errs[3] = parseNullTime(resume)
	r.LeaseUntil, errs[4] = parseNullTime(lease)
	return r, errors.Join(errs[:]...)
}

func raw(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

func (s *sqlStore) reader() (rdb, error) {
	if s.isClosed() {
		return rdb{}, ErrClosed
	}
	return rdb{s}, nil
}

// GetRun implements Store.
func (s *sqlStore) GetRun(ctx context.Context, id string) (_ Run, err error) {
	defer s.typedErr(&err)
	db, err := s.reader()
	if err != nil {
		return Run{}, err
	}
	if !s.storable(id) {
		return Run{}, fmt.Errorf("storage: run %q: %w", id, ErrRunNotFound) // no stored id has it
	}
	r, err := scanRun(db.QueryRowContext(ctx, `SELECT `+runColumns+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("storage: run %s: %w", id, ErrRunNotFound)
	}
	if err != nil {
		return Run{}, errf("get run", id, err)
	}
	return r, nil
}

func (s *sqlStore) queryRuns(ctx context.Context, q string, args ...any) (_ []Run, err error) {
	defer s.typedErr(&err)
	db, err := s.reader()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ResolveRun implements Store.
func (s *sqlStore) ResolveRun(ctx context.Context, idOrPrefix string) (Run, error) {
	p := strings.TrimSpace(idOrPrefix)
	if p == "" {
		return Run{}, fmt.Errorf("storage: resolve run: empty id: %w", ErrRunNotFound)
	}
	r, err := s.GetRun(ctx, p)
	if !errors.Is(err, ErrRunNotFound) {
		return r, err
	}
	tries := []string{p}
	if l := strings.ToLower(p); l != p {
		tries = append(tries, l) // ids are lower-case UUIDs; accept a prefix typed in capitals
	}
	for _, p := range tries {
		if !s.storable(p) {
			continue
		}
		// A range scan on the primary key: every id that starts with p sorts in [p, p+"\U0010FFFF").
		const limit = 6
		runs, err := s.queryRuns(ctx, `SELECT `+runColumns+` FROM runs WHERE id >= ? AND id < ?
			ORDER BY created_at DESC, id DESC LIMIT ?`, p, p+"\U0010FFFF", limit)
		if err != nil {
			return Run{}, errf("resolve run", p, err)
		}
		switch {
		case len(runs) == 1:
			return runs[0], nil
		case len(runs) > 1:
			e := &AmbiguousRunError{Prefix: idOrPrefix, More: len(runs) == limit}
			for _, r := range runs[:min(len(runs), 5)] {
				e.Candidates = append(e.Candidates, r.ID)
				e.Runs = append(e.Runs, r)
			}
			return Run{}, e // its message is for the user as it is
		}
	}
	return Run{}, fmt.Errorf("storage: resolve run %q: %w (see luft list)", idOrPrefix, ErrRunNotFound)
}

// LatestResumable implements Store.
func (s *sqlStore) LatestResumable(ctx context.Context) (Run, error) {
	runs, err := s.queryRuns(ctx, `SELECT `+runColumns+` FROM runs
		WHERE status IN ('running', 'failed', 'cancelled', 'suspended')
		ORDER BY created_at DESC, id DESC LIMIT 1`)
	if err != nil {
		return Run{}, fmt.Errorf("storage: latest resumable run: %w", err)
	}
	if len(runs) == 0 {
		return Run{}, fmt.Errorf("storage: no resumable run: %w", ErrRunNotFound)
	}
	return runs[0], nil
}

// ListRuns implements Store.
func (s *sqlStore) ListRuns(ctx context.Context, opts ListOptions) ([]Run, error) {
	var limit any = opts.Limit
	if opts.Limit <= 0 {
		limit = s.noLimit()
	}
	var (
		where []string
		args  []any
	)
	if opts.Status != "" {
		where, args = append(where, "status = ?"), append(args, opts.Status)
	}
	if opts.Before != "" {
		where = append(where, "(created_at, id) < (SELECT created_at, id FROM runs WHERE id = ?)")
		args = append(args, opts.Before)
	}
	q := `SELECT ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	runs, err := s.queryRuns(ctx, q+` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("storage: list runs: %w", err)
	}
	return runs, nil
}

// RequestCancel implements Store.
func (s *sqlStore) RequestCancel(ctx context.Context, runID string) error {
	now := fmtTime(s.now())
	return s.write(ctx, func(tx *wtx) error {
		if err := execOne(tx, "request cancel of run", runID,
			`UPDATE runs SET cancel_requested = TRUE, updated_at = ? WHERE id = ?`, now, runID); err != nil {
			return err
		}
		if err := tx.notify(Notice{Kind: NoticeCancel, RunID: runID}); err != nil {
			return errf("request cancel of run", runID, err)
		}
		return nil
	})
}

// CancelRequested implements Store.
func (s *sqlStore) CancelRequested(ctx context.Context, runID string) (_ bool, err error) {
	defer s.typedErr(&err)
	db, err := s.reader()
	if err != nil {
		return false, err
	}
	var v bool
	err = db.QueryRowContext(ctx, `SELECT cancel_requested FROM runs WHERE id = ?`, runID).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("storage: run %s: %w", runID, ErrRunNotFound)
	}
	if err != nil {
		return false, errf("cancel requested", runID, err)
	}
	return v, nil
}

// SaveFile implements Store.
func (s *sqlStore) SaveFile(ctx context.Context, runID, path string, content []byte) (string, error) {
	if path == "" {
		return "", fmt.Errorf("storage: save file of run %s: empty path", runID)
	}
	sum := sha256.Sum256(content)
	hexsum := hex.EncodeToString(sum[:])
	if content == nil {
		content = []byte{}
	}
	now := fmtTime(s.now())
	fence := fenceFor(ctx, runID)
	err := s.write(ctx, func(tx *wtx) error {
		if err := tx.checkFence("save file "+path+" of run", fence); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO files (run_id, path, sha256, content, created_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (run_id, path) DO UPDATE SET sha256 = excluded.sha256, content = excluded.content,
			created_at = excluded.created_at`, runID, s.bin(path), hexsum, content, now)
		return fkErr("save file "+path+" of run", runID, err)
	})
	if err != nil {
		return "", err
	}
	return hexsum, nil
}

// Files implements Store.
func (s *sqlStore) Files(ctx context.Context, runID string) (_ []File, err error) {
	defer s.typedErr(&err)
	db, err := s.reader()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT path, sha256, content, created_at FROM files WHERE run_id = ? ORDER BY path`, runID)
	if err != nil {
		return nil, errf("files of run", runID, err)
	}
	defer rows.Close()
	var out []File
	for rows.Next() {
		f := File{RunID: runID}
		var created string
		if err := rows.Scan(&f.Path, &f.SHA256, &f.Content, &created); err != nil {
			return nil, errf("files of run", runID, err)
		}
		if f.Content == nil {
			f.Content = []byte{} // SQLite returns an empty BLOB as NULL
		}
		if f.CreatedAt, err = parseTime(created); err != nil {
			return nil, errf("files of run", runID, err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// Phases implements Store.
func (s *sqlStore) Phases(ctx context.Context, runID string) (_ []Phase, err error) {
	defer s.typedErr(&err)
	db, err := s.reader()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT phase_id, label, planned, description, status, ok, failed,
		cancelled, started_at, done_at FROM phases WHERE run_id = ? ORDER BY phase_id`, runID)
	if err != nil {
		return nil, errf("phases of run", runID, err)
	}
	defer rows.Close()
	var out []Phase
	for rows.Next() {
		p := Phase{RunID: runID}
		var started, done sql.NullString
		if err := rows.Scan(&p.ID, &p.Label, &p.Planned, &p.Description, &p.Status, &p.OK, &p.Failed,
			&p.Cancelled, &started, &done); err != nil {
			return nil, errf("phases of run", runID, err)
		}
		var e1, e2 error
		p.StartedAt, e1 = parseNullTime(started)
		p.DoneAt, e2 = parseNullTime(done)
		if err := errors.Join(e1, e2); err != nil {
			return nil, errf("phases of run", runID, err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// fkErr turns a foreign-key failure (a write for a run that does not exist) into
// ErrRunNotFound.
func fkErr(what, runID string, err error) error {
	if err == nil {
		return nil
	}
	if isForeignKey(err) || errors.Is(err, errNoRunRow) {
		return fmt.Errorf("storage: %s %s: %w (create the run first)", what, runID, ErrRunNotFound)
	}
	return errf(what, runID, err)
}
