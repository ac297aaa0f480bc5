package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// S3Datasets is datasets_dir as the keys under prefix in an S3 bucket: the
// file a/b.jsonl is the object <prefix>a/b.jsonl. A key whose part after
// the prefix is not a clean relative path (a ./ or ../ segment, an empty
// one, a trailing slash) is never listed and cannot be named, whatever the
// S3 server would make of it.
func S3Datasets(ctx context.Context, c *s3.Client, bucket, prefix string) (DatasetFiles, error) {
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return nil, fmt.Errorf("s3://%s/%s: %w (check the bucket exists and the credentials may read it)", bucket, prefix, err)
	}
	return &s3Datasets{c: c, bucket: bucket, prefix: prefix, versions: map[string]etagVersion{}}, nil
}

type s3Datasets struct {
	c      *s3.Client
	bucket string
	prefix string // "" or ending in "/"

	// versions caches each key's content digest by its ETag, which
	// changes whenever the content does: listing does not read every
	// object each time.
	mu       sync.Mutex
	versions map[string]etagVersion
}

type etagVersion struct{ etag, digest string }

// maxVersions bounds the cache; past it, it starts over.
const maxVersions = 100000

func (d *s3Datasets) LocalDir() string { return "" }

func (d *s3Datasets) where(name string) string { return "s3://" + d.bucket + "/" + d.prefix + name }

func (d *s3Datasets) List(ctx context.Context, dir string, fn func(DatasetInfo) error) error {
	under := d.prefix
	if dir != "." {
		if err := checkName(dir); err != nil {
			return err
		}
		under += dir + "/"
	}
	p := s3.NewListObjectsV2Paginator(d.c, &s3.ListObjectsV2Input{Bucket: aws.String(d.bucket), Prefix: aws.String(under)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing %s: %w", d.where(strings.TrimPrefix(under, d.prefix)), err)
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), d.prefix)
			if checkName(name) != nil {
				continue
			}
			if err := fn(DatasetInfo{Path: name, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *s3Datasets) Stat(ctx context.Context, name string) (DatasetInfo, error) {
	if err := checkName(name); err != nil {
		return DatasetInfo{}, err
	}
	info, _, err := d.head(ctx, name)
	if !errors.Is(err, fs.ErrNotExist) {
		return info, err
	}
	// No object: a directory if keys are under it.
	out, lerr := d.c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(d.bucket), Prefix: aws.String(d.prefix + name + "/"), MaxKeys: aws.Int32(1)})
	if lerr != nil {
		return DatasetInfo{}, fmt.Errorf("stat %s: %w", d.where(name), lerr)
	}
	if len(out.Contents) == 0 {
		return DatasetInfo{}, err
	}
	return DatasetInfo{Path: name, Dir: true}, nil
}

// head describes an object and returns its ETag.
func (d *s3Datasets) head(ctx context.Context, name string) (DatasetInfo, string, error) {
	out, err := d.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(d.bucket), Key: aws.String(d.prefix + name)})
	if notFoundS3(err) {
		return DatasetInfo{}, "", fmt.Errorf("dataset %s: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return DatasetInfo{}, "", fmt.Errorf("stat %s: %w", d.where(name), err)
	}
	return DatasetInfo{Path: name, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, aws.ToString(out.ETag), nil
}

func (d *s3Datasets) Open(ctx context.Context, name string) (DatasetFile, error) {
	return d.open(ctx, name)
}

func (d *s3Datasets) open(ctx context.Context, name string) (*s3File, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	info, etag, err := d.head(ctx, name)
	if err != nil {
		return nil, err
	}
	return &s3File{ctx: ctx, d: d, key: d.prefix + name, etag: etag, info: info}, nil
}

func (d *s3Datasets) Version(ctx context.Context, name string) (string, error) {
	f, err := d.open(ctx, name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	d.mu.Lock()
	v, ok := d.versions[f.key]
	d.mu.Unlock()
	if ok && v.etag == f.etag && f.etag != "" {
		return v.digest, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", d.where(name), err)
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	d.mu.Lock()
	if len(d.versions) >= maxVersions {
		clear(d.versions)
	}
	d.versions[f.key] = etagVersion{f.etag, digest}
	d.mu.Unlock()
	return digest, nil
}

// s3File reads an object from its offset with a ranged GET, opened at the
// first Read after a Seek, and only while the object keeps the ETag it had
// when opened: a file replaced midway fails instead of mixing two
// versions.
type s3File struct {
	ctx  context.Context
	d    *s3Datasets
	key  string
	etag string
	info DatasetInfo
	off  int64
	body io.ReadCloser
}

func (f *s3File) Info() DatasetInfo { return f.info }

func (f *s3File) Read(p []byte) (int, error) {
	if f.off >= f.info.Size {
		return 0, io.EOF
	}
	if f.body == nil {
		in := &s3.GetObjectInput{Bucket: aws.String(f.d.bucket), Key: aws.String(f.key), Range: aws.String(fmt.Sprintf("bytes=%d-", f.off))}
		if f.etag != "" {
			in.IfMatch = aws.String(f.etag)
		}
		out, err := f.d.c.GetObject(f.ctx, in)
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", f.d.where(f.info.Path), err)
		}
		f.body = out.Body
	}
	n, err := f.body.Read(p)
	f.off += int64(n)
	if errors.Is(err, io.EOF) && f.off < f.info.Size {
		err = fmt.Errorf("reading %s: %w", f.d.where(f.info.Path), io.ErrUnexpectedEOF)
	}
	return n, err
}

func (f *s3File) Seek(offset int64, whence int) (int64, error) {
	var off int64
	switch whence {
	case io.SeekStart:
		off = offset
	case io.SeekCurrent:
		off = f.off + offset
	case io.SeekEnd:
		off = f.info.Size + offset
	default:
		return 0, errors.New("seek: invalid whence")
	}
	if off < 0 {
		return 0, errors.New("seek: negative offset")
	}
	if off != f.off && f.body != nil {
		f.body.Close()
		f.body = nil
	}
	f.off = off
	return off, nil
}

func (f *s3File) Close() error {
	if f.body != nil {
		return f.body.Close()
	}
	return nil
}

// notFoundS3 reports a missing object: NoSuchKey from GET, the bare 404 of
// a HEAD. S3Datasets has checked the bucket exists.
func notFoundS3(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound")
}
