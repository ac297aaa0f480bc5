package environment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	"evals.si/sandbox"
)

// trialSandbox makes a trial's sandbox: taken from the rung's warm pool
// when it has one (poolable: the sandbox needs nothing done to it after it
// is made), else made now. With closeLater its Close returns at once and
// the manager's closer kills and removes it behind the trial.
func (m *Manager) trialSandbox(ctx context.Context, rung sandbox.Rung, cfg sandbox.Config, poolable, closeLater bool) (sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	var err error
	if m.warm != nil && poolable && m.warmRungs[rung.Name()] {
		key, kerr := warmKey(rung, cfg)
		if kerr != nil {
			return nil, kerr
		}
		sb, err = m.warm.Take(ctx, key, func(ctx context.Context) (sandbox.Sandbox, error) { return m.create(ctx, rung, cfg) })
	} else {
		sb, err = m.create(ctx, rung, cfg)
	}
	if err != nil {
		return nil, err
	}
	if !closeLater {
		return sb, nil
	}
	c := &closing{Sandbox: sb, m: m}
	if ps, ok := sb.(policySetter); ok {
		return &closingPolicy{closing: c, ps: ps}, nil
	}
	return c, nil
}

// warmKey is everything a sandbox is made from: two trials share a pool
// only when they would have made the very same sandbox. The state
// directory is the manager's to give, per sandbox.
func warmKey(rung sandbox.Rung, cfg sandbox.Config) (string, error) {
	cfg.StateDir = ""
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("keying the warm pool: %w", err)
	}
	h := sha256.Sum256(append([]byte(rung.Name()+"\x00"), b...))
	return rung.Name() + "-" + hex.EncodeToString(h[:12]), nil
}

// closing is a trial's sandbox whose Close hands it to the manager's
// closer.
type closing struct {
	sandbox.Sandbox
	m    *Manager
	once sync.Once
}

func (s *closing) Close(ctx context.Context) error {
	s.once.Do(func() { s.m.closer.Close(ctx, s.Sandbox) })
	return nil
}

// policySetter is a sandbox whose network can widen mid-trial; a closing
// sandbox keeps the capability exactly when its rung's sandbox has it.
type policySetter interface {
	SetPolicy(sandbox.Policy) error
}

type closingPolicy struct {
	*closing
	ps policySetter
}

func (s *closingPolicy) SetPolicy(p sandbox.Policy) error { return s.ps.SetPolicy(p) }
