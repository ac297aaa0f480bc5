package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

// Each Start is a database of its own in one shared cluster, reachable on
// loopback only.
func TestStartGivesSeparateDatabases(t *testing.T) {
	ctx := context.Background()
	var names []string
	for range 2 {
		conn, err := pgx.Connect(ctx, Start(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var db, addr string
		if err := conn.QueryRow(ctx, "SELECT current_database(), host(inet_server_addr())").Scan(&db, &addr); err != nil {
			t.Fatal(err)
		}
		if addr != "127.0.0.1" {
			t.Errorf("server address %s, want 127.0.0.1", addr)
		}
		var listen string
		if err := conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen); err != nil || listen != "127.0.0.1" {
			t.Errorf("listen_addresses = %q, %v; want 127.0.0.1 only", listen, err)
		}
		names = append(names, db)
	}
	if names[0] == names[1] {
		t.Errorf("two Starts gave the same database %s", names[0])
	}
}
