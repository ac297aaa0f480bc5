// Command http-agent is the peer examples/agents/http.yaml drives: POST /run
// takes {"question", "history", "session"} (the example's body_template),
// asks an OpenAI-compatible model and answers
// {"output": {"text": ...}, "steps": [...]}, the shape the example's
// output_path and messages_path read.
//
//	evalsid model-server --script examples/agents/model-server/peer-agents.yaml --listen 127.0.0.1:8089 &
//	go run ./examples/agents/peers/http-agent &
//	evalsi run -f examples/agents/http.yaml
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"evals.si/examples/agents/peers/chat"
)

type runRequest struct {
	Question string         `json:"question"`
	History  []chat.Message `json:"history"`
	Session  string         `json:"session"`
}

type runResponse struct {
	Output struct {
		Text string `json:"text"`
	} `json:"output"`
	Steps []chat.Message `json:"steps"`
}

func main() {
	fs := flag.NewFlagSet("http-agent", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:8090", "address to serve POST /run on")
	model, keyEnv := chat.Flags(fs)
	fs.Parse(os.Args[1:])
	model.Resolve(*keyEnv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, model); err != nil {
		fmt.Fprintln(os.Stderr, "http-agent:", err)
		os.Exit(1)
	}
}

func handler(model *chat.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /run", func(w http.ResponseWriter, r *http.Request) {
		// JSON only: a web page can send a cross-origin text/plain POST
		// without a preflight, and must not drive the agent (and its key).
		if ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.TrimSpace(ct) != "application/json" {
			http.Error(w, "want Content-Type: application/json", http.StatusUnsupportedMediaType)
			return
		}
		var in runRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&in); err != nil {
			http.Error(w, `want a JSON body {"question": "...", "history": [...], "session": "..."}: `+err.Error(), http.StatusBadRequest)
			return
		}
		msgs := []chat.Message{{Role: "system", Content: chat.System}}
		msgs = append(msgs, in.History...)
		// The history may already end with this turn's question.
		if n := len(in.History); n == 0 || in.History[n-1].Role != "user" || in.History[n-1].Content != in.Question {
			msgs = append(msgs, chat.Message{Role: "user", Content: in.Question})
		}
		answer, err := model.Ask(r.Context(), msgs)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		var out runResponse
		out.Output.Text = answer
		out.Steps = []chat.Message{{Role: "assistant", Content: answer}}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	return mux
}

func run(ctx context.Context, listen string, model *chat.Client) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	fmt.Printf("http-agent: serving http://%s/run (model %s at %s)\n", ln.Addr(), model.Model, model.BaseURL)
	hs := &http.Server{Handler: handler(model)}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
