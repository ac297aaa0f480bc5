package regress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/spec"
)

// appendRecords appends the records whose ids the dataset file does not
// have yet, and returns how many it appended and how many it skipped.
//
// The file and the directories to it are opened beneath dir without
// following symlinks (whoever can write into datasets_dir must not be able
// to point a project's dataset at another file), locked with flock for the
// whole read-check-append so that two concurrent promotes of the same run
// add each record once, written in one append of whole lines, and synced.
func appendRecords(ctx context.Context, dir, project, name string, recs []spec.Record) (added, skipped int, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return 0, 0, fmt.Errorf("creating the datasets directory: %w", err)
	}
	root, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("opening the datasets directory %s: %w", dir, err)
	}
	defer unix.Close(root)
	promotedDir, err := subdir(root, "promoted")
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(promotedDir)
	projectDir, err := subdir(promotedDir, project)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(projectDir)
	fd, err := unix.Openat2(projectDir, name+".jsonl", &unix.OpenHow{
		Flags:   unix.O_RDWR | unix.O_CREAT | unix.O_APPEND | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Mode:    0o640,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("opening the dataset file: %w", err)
	}
	f := os.NewFile(uintptr(fd), name+".jsonl")
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, 0, fmt.Errorf("the dataset file is a %s, not a regular file", fi.Mode().Type())
	}
	if err := lock(ctx, fd); err != nil {
		return 0, 0, fmt.Errorf("locking the dataset file: %w", err)
	}
	// Closing the file releases the lock.

	// Under the lock, the file is what other promotes finished writing.
	fi, err = f.Stat()
	if err != nil {
		return 0, 0, err
	}
	size := fi.Size()
	have, endsInNewline, torn, err := readIDs(io.NewSectionReader(f, 0, size))
	if err != nil {
		return 0, 0, err
	}
	if torn >= 0 {
		// A promote that died mid-append left part of a line: drop it (its
		// records are appended again below).
		if err := f.Truncate(torn); err != nil {
			return 0, 0, fmt.Errorf("dropping a torn last line: %w", err)
		}
		size, endsInNewline = torn, true
	}
	var buf bytes.Buffer
	if size > 0 && !endsInNewline {
		// A hand-edited file may lack its last newline; never glue a
		// record onto its last line.
		buf.WriteByte('\n')
	}
	for _, rec := range recs {
		if have[rec.ID] {
			skipped++
			continue
		}
		line, err := recordLine(rec)
		if err != nil {
			return 0, 0, err
		}
		buf.Write(line)
		have[rec.ID] = true
		added++
	}
	if added == 0 {
		return 0, skipped, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		// A short write (a full disk) would leave half a line: take it back.
		return 0, 0, errors.Join(fmt.Errorf("appending: %w", err), f.Truncate(size))
	}
	if err := f.Sync(); err != nil {
		return 0, 0, fmt.Errorf("syncing the dataset file: %w", err)
	}
	// The file may be new: make its directory entry durable too.
	if err := unix.Fsync(projectDir); err != nil {
		return 0, 0, fmt.Errorf("syncing the dataset directory: %w", err)
	}
	return added, skipped, nil
}

// subdir creates (if needed) and opens the directory name under parent,
// refusing a symlink.
func subdir(parent int, name string) (int, error) {
	created := true
	if err := unix.Mkdirat(parent, name, 0o750); errors.Is(err, unix.EEXIST) {
		created = false
	} else if err != nil {
		return -1, fmt.Errorf("creating directory %s: %w", name, err)
	}
	fd, err := unix.Openat2(parent, name, &unix.OpenHow{
		Flags:   unix.O_DIRECTORY | unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("opening directory %s (it must be a directory, not a symlink): %w", name, err)
	}
	if created {
		if err := unix.Fsync(parent); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("syncing the parent of %s: %w", name, err)
		}
	}
	return fd, nil
}

// lock takes an exclusive flock on fd, waiting for other promotes while ctx
// allows (flock itself cannot be cancelled, so it is polled).
func lock(ctx context.Context, fd int) error {
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// readIDs returns the ids of the records in a JSONL dataset and whether its
// last byte is a newline. A last line without a newline that starts as
// Promote's lines do but is not JSON is a torn append: torn is its offset
// (-1 when there is none). Any other line
// that is not a JSON object with an id is an error: appending to a file that
// is not a dataset would hide the problem.
func readIDs(r io.Reader) (ids map[string]bool, endsInNewline bool, torn int64, err error) {
	ids = map[string]bool{}
	br := bufio.NewReaderSize(r, 64<<10)
	endsInNewline, torn = true, -1
	var off int64
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, false, -1, fmt.Errorf("reading the dataset file: %w", err)
		}
		if len(b) > 0 {
			endsInNewline = b[len(b)-1] == '\n'
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			var rec struct {
				ID string `json:"id"`
			}
			switch jerr := json.Unmarshal(t, &rec); {
			case jerr != nil && !endsInNewline && bytes.HasPrefix(t, []byte(`{"id":`)):
				// How every line Promote writes starts.
				return ids, false, off, nil
			case jerr != nil || rec.ID == "":
				return nil, false, -1, fmt.Errorf("the dataset file's line %d is not a record with an id; fix or remove it before promoting into it", line)
			}
			ids[rec.ID] = true
		}
		off += int64(len(b))
		if err == io.EOF {
			return ids, endsInNewline, -1, nil
		}
	}
}
