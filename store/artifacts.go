package store

import (
	"context"
	"database/sql"
	"fmt"
	"io"
)

// Artifact is a named file a trial produced (its git diff, a log, a
// recording), kept as a blob.
type Artifact struct {
	TrialID   string
	Name      string
	Digest    string
	Size      int64
	MediaType string
}

// PutArtifact streams r into a blob and records it as the trial's artifact
// name, replacing an artifact of the same name.
func (s *Store) PutArtifact(ctx context.Context, trialID, name, mediaType string, r io.Reader) (Artifact, error) {
	if name == "" {
		return Artifact{}, fmt.Errorf("storing artifact of trial %s: empty name", trialID)
	}
	d, size, err := s.PutBlobReader(ctx, r)
	if err != nil {
		return Artifact{}, fmt.Errorf("storing artifact %s of trial %s: %w", name, trialID, err)
	}
	a := Artifact{TrialID: trialID, Name: name, Digest: d, Size: size, MediaType: mediaType}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO artifacts (trial_id, name, digest, size, media_type) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (trial_id, name) DO UPDATE SET digest = excluded.digest, size = excluded.size, media_type = excluded.media_type`,
			a.TrialID, a.Name, a.Digest, a.Size, a.MediaType)
		if isForeignKey(err) {
			return fmt.Errorf("trial %s: %w", trialID, ErrNotFound)
		}
		return err
	})
	if err != nil {
		return Artifact{}, fmt.Errorf("storing artifact %s of trial %s: %w", name, trialID, err)
	}
	return a, nil
}

// Artifacts lists a trial's artifacts by name; read one with OpenBlob.
func (s *Store) Artifacts(ctx context.Context, trialID string) ([]Artifact, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT trial_id, name, digest, size, media_type FROM artifacts WHERE trial_id = ? ORDER BY name", trialID)
	if err != nil {
		return nil, fmt.Errorf("listing artifacts of trial %s: %w", trialID, err)
	}
	defer rows.Close()
	var as []Artifact
	for rows.Next() {
		var a Artifact
		if err := rows.Scan(&a.TrialID, &a.Name, &a.Digest, &a.Size, &a.MediaType); err != nil {
			return nil, fmt.Errorf("listing artifacts of trial %s: %w", trialID, err)
		}
		as = append(as, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing artifacts of trial %s: %w", trialID, err)
	}
	return as, nil
}
