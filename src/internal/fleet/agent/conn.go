package agent

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	pb "github.com/argus-mc/argus/src/apis/fleet"
)

// conn is one stream's two directions: receive handles what the hub sends
// (work, manifests, acknowledgements); sendLoop alone sends (gRPC allows
// one sender), reports as status changes, and a heartbeat report when
// nothing did for a while.
type conn struct {
	a         *Agent
	stream    pb.Fleet_ConnectClient
	log       *logrus.Entry
	heartbeat time.Duration

	mu   sync.Mutex
	out  []*pb.AgentMessage
	wake chan struct{}
}

func (c *conn) queue(m *pb.AgentMessage) {
	c.mu.Lock()
	c.out = append(c.out, m)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) receive() error {
	for {
		m, err := c.stream.Recv()
		if err != nil {
			return err
		}
		switch b := m.GetBody().(type) {
		case *pb.HubMessage_Work:
			c.apply(c.a.work.batch(b.Work))
		case *pb.HubMessage_Blobs:
			c.apply(c.a.work.blobsArrived(b.Blobs))
		case *pb.HubMessage_StatusAck:
			c.a.up.ack(b.StatusAck.GetSeq())
		}
	}
}

// apply hands what a batch or manifests settled to the cluster, asks for
// missing manifests, and acknowledges a revision taken in.
func (c *conn) apply(o outcome) {
	for _, k := range o.forget {
		c.a.opts.Cluster.Forget(k)
		c.a.up.forget(k)
	}
	for _, w := range o.apply {
		c.log.WithFields(logrus.Fields{"context": w.Key.Context, "app": w.Key.App, "generation": w.Generation, "delete": w.Delete}).Info("work received")
		c.a.opts.Cluster.Apply(w)
	}
	for _, r := range o.ask {
		c.queue(&pb.AgentMessage{Body: &pb.AgentMessage_BlobRequest{BlobRequest: r}})
	}
	if o.ack > 0 {
		c.queue(&pb.AgentMessage{Body: &pb.AgentMessage_WorkAck{WorkAck: &pb.WorkAck{Revision: o.ack}}})
	}
}

func (c *conn) sendLoop(ctx context.Context) error {
	t := time.NewTimer(0) // the first report goes at once: it carries the monitor's state
	defer t.Stop()
	for {
		heartbeat := false
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-c.a.up.wake:
		case <-t.C:
			heartbeat = true
		}
		c.mu.Lock()
		out := c.out
		c.out = nil
		c.mu.Unlock()
		for _, m := range out {
			if err := c.stream.Send(m); err != nil {
				return err
			}
		}
		for {
			r := c.a.up.next(heartbeat, c.a.opts.Cluster.Monitor)
			if r == nil {
				break
			}
			heartbeat = false
			if err := c.stream.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Report{Report: r}}); err != nil {
				return err
			}
			t.Reset(c.heartbeat)
		}
	}
}
