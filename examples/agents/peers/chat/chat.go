// Package chat is the model call the example peer agents share: one
// OpenAI-compatible chat completion, so a peer runs against any such
// endpoint, offline against `evalsid model-server`.
package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Client calls POST <BaseURL>/chat/completions.
type Client struct {
	BaseURL string
	Model   string
	// APIKey is sent as a bearer token when set.
	APIKey string
	HTTP   *http.Client
}

// Flags registers -base-url, -model and -api-key-env on fs and returns the
// client they configure (its APIKey is read from the named variable when
// the flags are parsed, by Resolve).
func Flags(fs *flag.FlagSet) (*Client, *string) {
	c := &Client{HTTP: &http.Client{Timeout: 2 * time.Minute}}
	fs.StringVar(&c.BaseURL, "base-url", "http://127.0.0.1:8089/v1", "an OpenAI-compatible API (offline: evalsid model-server --listen 127.0.0.1:8089)")
	fs.StringVar(&c.Model, "model", "gpt-4o-mini", "the model to ask")
	// No key by default: the default endpoint is the offline model server,
	// plain HTTP on a port any local user could bind, and a real key must
	// not go there unasked.
	keyEnv := fs.String("api-key-env", "", "the variable holding the API key, e.g. OPENAI_API_KEY with a real -base-url (empty: no key is sent)")
	return c, keyEnv
}

// Resolve reads the API key from the variable -api-key-env named.
func (c *Client) Resolve(keyEnv string) {
	if keyEnv != "" {
		c.APIKey = os.Getenv(keyEnv)
	}
}

// Ask sends the conversation and returns the assistant's text.
func (c *Client) Ask(ctx context.Context, msgs []Message) (string, error) {
	body, err := json.Marshal(map[string]any{"model": c.Model, "messages": msgs})
	if err != nil {
		return "", fmt.Errorf("encoding the chat request: %w", err)
	}
	url := strings.TrimSuffix(c.BaseURL, "/") + "/chat/completions"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("calling the model at %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("calling the model at %s (is it running? see -base-url): %w", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("reading the model's reply from %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("the model at %s answered %s: %s", url, resp.Status, strings.TrimSpace(string(raw)))
	}
	var out struct {
		Choices []struct {
			Message Message `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("decoding the model's reply from %s: %w", url, err)
	}
	if len(out.Choices) == 0 {
		return "", errors.New("the model's reply has no choices")
	}
	return out.Choices[0].Message.Content, nil
}

// System is the peers' system prompt.
const System = "You are a concise assistant. Answer the question directly."
