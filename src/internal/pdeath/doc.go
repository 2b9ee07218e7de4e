// Package pdeath starts child processes that the kernel kills when the
// process that started them dies, so a killed orchestrator or simcluster
// leaves no stores, control planes or render workers behind.
//
// Linux sends the parent-death signal (prctl PR_SET_PDEATHSIG) when the
// thread that forked the child ends, not the process. The Go runtime ends
// a thread when a goroutine locked to it ends locked, and moves unlocked
// goroutines between threads at will: a child started from an unlocked
// goroutine dies whenever its thread is ended for another goroutine's
// sake, and a goroutine that starts children and ends locked takes all of
// them along. Start therefore starts each child from a goroutine locked
// to its thread for the child's life, and gives the thread back once the
// child has been waited for.
//
//	child, err := pdeath.Start(cmd, nil)
//	...
//	<-child.Done() // waited for; child.Err() is cmd.Wait's error
package pdeath
