package store

// ParseDigest checks a blob digest's form ("sha256:" and 64 lowercase hex
// digits) and returns its hex part, for Blobs kept elsewhere (store/s3store)
// to refuse exactly what FSBlobs refuses.
func ParseDigest(digest string) (string, error) { return parseDigest(digest) }
