// Package s3store keeps content-addressed blobs in an S3 bucket (any
// S3-compatible server: path-style addressing and a configurable endpoint),
// so a server and its workers in other pods share them without a shared
// file system. It implements store.Blobs as store.FSBlobs does, key for
// path: <prefix>sha256/<first two hex digits>/<hex>.
//
// A blob is spooled to an unlinked temporary file while its digest is
// computed (memory stays constant, and a reader that fails midway leaves
// nothing behind), then uploaded under its final key with its SHA-256 as
// the request's checksum, so the S3 server refuses bytes that differ from
// what was hashed. An S3 object appears only once its upload completes: a
// blob that exists is whole. Reads verify the content against the digest.
package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"evals.si/store"
)

// Config is how to reach an S3 server. The keys are given, not read here:
// the caller reads them from where its operator keeps them.
type Config struct {
	// Endpoint is the server's URL (http://versitygw:7070); empty means
	// AWS's own endpoint for Region.
	Endpoint  string
	Region    string
	PathStyle bool
	AccessKey string
	SecretKey string
}

// NewClient returns an S3 client for c.
func NewClient(c Config) (*s3.Client, error) {
	if c.Region == "" {
		return nil, errors.New("s3: a region is required (us-east-1 for most S3-compatible servers)")
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return nil, errors.New("s3: an access key and a secret key are required")
	}
	o := s3.Options{
		Region:       c.Region,
		UsePathStyle: c.PathStyle,
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, ""),
		// Only the checksums this package sets (SHA-256, which is the
		// digest): the SDK's default CRC32 trailers are not understood by
		// every S3-compatible server.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return nil, fmt.Errorf("s3: endpoint %q is not an http(s) URL such as http://s3.example:7070 (without credentials)", c.Endpoint)
		}
		o.BaseEndpoint = aws.String(c.Endpoint)
	}
	return s3.New(o), nil
}

// Options place blobs in a bucket.
type Options struct {
	Bucket string
	// Prefix is the key prefix blobs live under ("evalsi/blobs"); a
	// trailing slash is added.
	Prefix string
	// PartSize is a multipart upload's part size (default 16 MiB, at
	// least 5 MiB, S3's minimum); smaller blobs are one PUT.
	PartSize int64
	// TempDir holds the spool files (default os.TempDir()).
	TempDir string
}

const (
	defaultPartSize = 16 << 20
	minPartSize     = 5 << 20
	maxParts        = 10000 // S3's limit on a multipart upload
)

// Blobs is a store.Blobs in an S3 bucket. It stores bytes as given:
// redacting them is the store's job (postgres.Store redacts, then calls
// Blobs). Safe for concurrent use, also by several processes.
type Blobs struct {
	c        *s3.Client
	bucket   string
	prefix   string
	partSize int64
	tmp      string
}

var _ store.Blobs = (*Blobs)(nil)

// Open checks that the bucket is reachable with the client's credentials
// and returns its blob store.
func Open(ctx context.Context, c *s3.Client, o Options) (*Blobs, error) {
	prefix, err := CleanPrefix(o.Prefix)
	if err != nil {
		return nil, err
	}
	if o.Bucket == "" {
		return nil, errors.New("s3 blobs: a bucket is required")
	}
	b := &Blobs{c: c, bucket: o.Bucket, prefix: prefix, partSize: o.PartSize, tmp: o.TempDir}
	if b.partSize == 0 {
		b.partSize = defaultPartSize
	}
	if b.partSize < minPartSize {
		return nil, fmt.Errorf("s3 blobs: part size %d is below S3's minimum of %d bytes", b.partSize, minPartSize)
	}
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(o.Bucket)}); err != nil {
		return nil, fmt.Errorf("opening blobs in s3://%s/%s: %w (check the bucket exists and the credentials may read and write it)", o.Bucket, prefix, err)
	}
	return b, nil
}

// CleanPrefix checks a key prefix (clean relative segments, no dot or
// empty ones, which some S3-compatible servers map onto a file system) and
// returns it with one trailing slash, or "" for the bucket's root.
func CleanPrefix(p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("s3 key prefix %q has an empty or dot segment; give a clean path such as evalsi/blobs", p)
		}
	}
	return p + "/", nil
}

// Location is the bucket and prefix blobs live under, as s3://bucket/prefix.
func (b *Blobs) Location() string { return "s3://" + b.bucket + "/" + b.prefix }

func (b *Blobs) key(sum string) string { return b.prefix + "sha256/" + sum[:2] + "/" + sum }

// PutBlob stores data and returns its digest.
func (b *Blobs) PutBlob(ctx context.Context, data []byte) (string, error) {
	d, _, err := b.PutBlobReader(ctx, bytes.NewReader(data))
	return d, err
}

// PutBlobReader streams r into a blob in constant memory and returns its
// digest and size.
func (b *Blobs) PutBlobReader(ctx context.Context, r io.Reader) (digest string, size int64, err error) {
	spool, err := os.CreateTemp(b.tmp, "evalsi-blob-*")
	if err != nil {
		return "", 0, fmt.Errorf("storing blob: creating its spool file: %w", err)
	}
	// Unlinked at once: the open file is all there is, so nothing is left
	// behind however this ends.
	os.Remove(spool.Name())
	defer spool.Close()
	h := sha256.New()
	size, err = io.Copy(io.MultiWriter(spool, h), ctxReader{ctx, r})
	if err != nil {
		return "", 0, fmt.Errorf("storing blob: spooling it to %s: %w", spool.Name(), err)
	}
	sum := h.Sum(nil)
	digest = "sha256:" + hex.EncodeToString(sum)
	key := b.key(hex.EncodeToString(sum))
	switch n, err := b.size(ctx, key); {
	case err == nil && n == size:
		// Already stored: content addressing makes the copies identical.
		return digest, size, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return "", 0, fmt.Errorf("storing blob %s: %w", digest, err)
	}
	if size <= b.partSize {
		err = b.putOne(ctx, key, spool, size, sum)
	} else {
		err = b.putParts(ctx, key, spool, size)
	}
	if err != nil {
		return "", 0, fmt.Errorf("storing blob %s in s3://%s/%s: %w", digest, b.bucket, key, err)
	}
	return digest, size, nil
}

// putOne uploads a blob in one PUT, the whole blob's SHA-256 its checksum.
func (b *Blobs) putOne(ctx context.Context, key string, f *os.File, size int64, sum []byte) error {
	_, err := b.c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(b.bucket), Key: aws.String(key),
		Body: io.NewSectionReader(f, 0, size), ContentLength: aws.Int64(size),
		ContentType:       aws.String("application/octet-stream"),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
		ChecksumSHA256:    aws.String(base64.StdEncoding.EncodeToString(sum)),
	})
	return err
}

// putParts uploads a blob in parts, each with its own SHA-256 checksum,
// and aborts the upload when anything fails, so no part lingers.
func (b *Blobs) putParts(ctx context.Context, key string, f *os.File, size int64) (err error) {
	part := max(b.partSize, (size+maxParts-1)/maxParts)
	up, err := b.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(b.bucket), Key: aws.String(key),
		ContentType:       aws.String("application/octet-stream"),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
	})
	if err != nil {
		return fmt.Errorf("starting a multipart upload: %w", err)
	}
	defer func() {
		if err != nil {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, _ = b.c.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: aws.String(b.bucket), Key: aws.String(key), UploadId: up.UploadId})
		}
	}()
	var done []types.CompletedPart
	for n, off := int32(1), int64(0); off < size; n, off = n+1, off+part {
		length := min(part, size-off)
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, off, length)); err != nil {
			return fmt.Errorf("reading part %d from the spool file: %w", n, err)
		}
		sum := base64.StdEncoding.EncodeToString(h.Sum(nil))
		out, err := b.c.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(b.bucket), Key: aws.String(key), UploadId: up.UploadId, PartNumber: aws.Int32(n),
			Body: io.NewSectionReader(f, off, length), ContentLength: aws.Int64(length),
			ChecksumAlgorithm: types.ChecksumAlgorithmSha256, ChecksumSHA256: aws.String(sum),
		})
		if err != nil {
			return fmt.Errorf("uploading part %d: %w", n, err)
		}
		done = append(done, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n), ChecksumSHA256: aws.String(sum)})
	}
	_, err = b.c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(b.bucket), Key: aws.String(key), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done},
	})
	if err != nil {
		return fmt.Errorf("completing the multipart upload: %w", err)
	}
	return nil
}

// GetBlob reads a whole blob and checks its content against the digest.
func (b *Blobs) GetBlob(ctx context.Context, digest string) ([]byte, error) {
	rc, err := b.OpenBlob(ctx, digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(ctxReader{ctx, rc})
	if err != nil {
		return nil, fmt.Errorf("reading blob %s: %w", digest, err)
	}
	return data, nil
}

// OpenBlob opens a blob for streaming. A missing blob is store.ErrNotFound.
// The reader checks the content against the digest as it reads: a blob
// changed in the bucket fails at its end instead of reading as valid.
func (b *Blobs) OpenBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sum, err := store.ParseDigest(digest)
	if err != nil {
		return nil, err
	}
	key := b.key(sum)
	out, err := b.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(key)})
	if isNotFound(err) {
		return nil, fmt.Errorf("blob %s: %w", digest, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("opening blob %s in s3://%s/%s: %w", digest, b.bucket, key, err)
	}
	return &verifying{body: out.Body, h: sha256.New(), want: sum, where: "s3://" + b.bucket + "/" + key, digest: digest}, nil
}

// BlobSize is a blob's size in bytes. A missing blob is store.ErrNotFound.
func (b *Blobs) BlobSize(ctx context.Context, digest string) (int64, error) {
	sum, err := store.ParseDigest(digest)
	if err != nil {
		return 0, err
	}
	n, err := b.size(ctx, b.key(sum))
	if err != nil {
		return 0, fmt.Errorf("blob %s: %w", digest, err)
	}
	return n, nil
}

func (b *Blobs) size(ctx context.Context, key string) (int64, error) {
	out, err := b.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(key)})
	if isNotFound(err) {
		return 0, store.ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("stat s3://%s/%s: %w", b.bucket, key, err)
	}
	return aws.ToInt64(out.ContentLength), nil
}

// isNotFound reports a missing object: NoSuchKey from GET, or the bare
// 404 a HEAD answers (which has no body to name an error code). Open's
// HeadBucket has already told a missing bucket apart.
func isNotFound(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound")
}

// verifying hashes what it reads and, at the end, fails instead of
// reporting EOF when the content is not the digest's.
type verifying struct {
	body   io.ReadCloser
	h      hash.Hash
	want   string
	where  string
	digest string
}

func (v *verifying) Read(p []byte) (int, error) {
	n, err := v.body.Read(p)
	v.h.Write(p[:n])
	if errors.Is(err, io.EOF) && hex.EncodeToString(v.h.Sum(nil)) != v.want {
		return n, fmt.Errorf("reading blob %s: content does not match its digest; the object %s is corrupt", v.digest, v.where)
	}
	return n, err
}

func (v *verifying) Close() error { return v.body.Close() }

// ctxReader stops a long copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
