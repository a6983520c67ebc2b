/*
 * Promela model of Prophet's slot handover and claim protocol, for spin.
 * tests/model/run.sh checks it (`make model-check`; a test in make check).
 *
 * What it mirrors (one slot, one task T that is due, two workers):
 *   - ZooKeeper slot node {owner, requested, epoch} with versioned writes,
 *     ephemeral /workers nodes = sessions: docs/architecture.md, and
 *     worker/coord.c: rebalance() (the master: a dead owner's slot given
 *     directly with epoch+1, a live owner's moved through "requested"),
 *     begin_release() + try_finish_release() (the owner drains, then
 *     writes owner=requested, epoch+1 with the node's version),
 *     slot_reconcile() / slot_gain() / redis_fence_cb() (the new owner
 *     raises the Redis fence, then claims; the DB fence is raised
 *     asynchronously: submit_fence() / fence_run()),
 *     slot_lose(), coord_fresh() / coord_may_claim() (self-fencing: a
 *     worker whose session may have expired sends no claim).
 *   - proto/scripts.h SCRIPT_FENCE and SCRIPT_CLAIM (the claim is refused
 *     when the slot's Redis fence is above the claim's epoch, and raises
 *     it otherwise), SCRIPT_REQUEUE (worker/scanner.c reap_slot: the
 *     owner requeues expired leases), SCRIPT_FORGET (worker/firing.c
 *     forget(), called after every DB batch, fenced rows included).
 *   - worker/firing.c firing_publish_task() (publish), firing_dr_cb() and
 *     mark_run() (the delivered update, refused when the DB fence
 *     SQL_SLOT_FENCE_SHARED is above the task's epoch), and
 *     worker/scanner.c sweep_slot() (overdue DB tasks missing from Redis
 *     are re-indexed).
 *
 * A claim is two steps, as in the code: the worker sends it (while it
 * believes itself owner and fresh) and Redis runs it later; a message in
 * flight can outlive the sender's session, which is what the fence is for.
 * ZooKeeper session expiry implies the worker has self-fenced (it stops
 * sending claims at 2/3 of the session timeout, measured on the monotonic
 * clock, before the server expires the session). A crash (kill -9) drops
 * the worker's memory; a claim it sent may still run in Redis.
 *
 * Checked:
 *   S1 (assert) never two publishers of one task under one epoch: every
 *      publish under epoch e comes from the single worker that owned e.
 *   S2 (assert) the claim fence: no claim under epoch e succeeds once the
 *      owner of a higher epoch has started (raised its fence), so at any
 *      time one epoch claims.
 *   L1 (ltl live) every claimed task is eventually delivered (published
 *      and marked delivered in the DB), under weak fairness, once the
 *      bounded faults (MAXX expiries, MAXC crashes, MAXH handovers) stop.
 * Not modelled: Redis losing the fence key (restart, flush; the DB fence
 * and the rebuild cover that, tests/chaos exercises it), DB mode, several
 * tasks and slots (claims are per task; slots are independent).
 *
 * -DBROKEN drops the fence check from the claim script: spin must find a
 * violation of S2 (tests/model/run.sh asserts that it does).
 *
 * The slot's phases in the worker (enum slot_phase, worker/slotfsm.c) are
 * owned[] and releasing[] here: idle (neither), owned, draining
 * (releasing). The C code has two more, starting (the fences going up)
 * and handing (the handover write out), which the model's atomic gain
 * and release steps pass through. Each worker step that changes a phase
 * says which moves of the C table it stands for, in a "phase:" comment
 * (paths "a -> b -> c", comma-separated); tests/model/run.sh checks that
 * these are exactly the moves of the C table (test_slotfsm --moves), so
 * neither changes without the other.
 *
 * -DEOS models kafka.exactly_once (worker/eos.c, docs/architecture.md,
 * "Exactly-once publishing"): each worker process publishes through one
 * transactional producer of its own (a transactional id per incarnation:
 * a crash starts a new one). The transaction coordinator's producer epoch
 * is abstracted to whether an instance is still the current one of its id
 * (pValid): making the producer bumps the epoch (the new instance is
 * current, an open transaction of an earlier one aborted), and so does
 * another's init_transactions with the same id (a fence). The DB's slot
 * record names the producer that last published for the slot (sTx).
 * Opening the slot (eos_slot_gained / producer_lost -> start_open):
 *   1. read (SJ_READ): raise the DB fence to our epoch, read sTx (refused
 *      under a newer epoch);
 *   2. fence (run_fence): init_transactions with sTx's id unless it is
 *      ours: bumps its epoch, aborts its open transaction;
 *   3. claim (SJ_CLAIM): sTx = ours, only if the DB fence is still our
 *      epoch and our producer is made (a later making, after a fatal
 *      error, opens the slot again: producer_lost);
 *   4. read the record's marker partition from the checkpoint: a
 *      committed marker not yet behind the checkpoint is recorded
 *      delivered (apply_found -> the mark path and forget);
 *   5. if that partition is not ours, move the checkpoint to ours, at
 *      its end as step 4 saw it (SJ_SWITCH, for our epoch and producer),
 *      before the slot is ready (eos_slot_ready gates the claims).
 * A producer writes its markers to its own partition (PART: one per
 * worker, the same for its incarnations; -DSHARED: both workers share
 * one, as two worker ids hashing alike do), the slot's record names the
 * partition its checkpoint is in (sPart, 0: the slot's own, nothing in
 * it). While ready with nothing unrecorded, a worker moves the
 * checkpoint to past its own last commit (advance: committed_end).
 * The open on a gain waits until the worker holds nothing of the slot
 * (tasks of an earlier ownership of its own finish first); a task claimed
 * under an older ownership is never published (eos_publish). A handover
 * after a full drain clears our producer from the record first
 * (eos_release), so the next owner fences nobody. Publishing is a
 * transaction begun with the worker's producer epoch, committed only if
 * that is still the coordinator's (a fenced zombie's commit is refused);
 * the commit makes the task's record and its marker visible together. A
 * commit may also succeed unseen (a fatal error, outcome unknown), and a
 * fatal error may come at any time (another slot's transaction): the
 * producer is made again and the slot opens again. The coordinator may
 * abort an open transaction (its timeout). The checkpoint moves past the
 * marker once the task's delivered update ran under an epoch the DB
 * fence still allows (advance -> SQL_EOS_CKPT_SET ... WHERE epoch =
 * ours).
 *   S3 (assert) no task committed twice (read_committed consumers see
 *      each task once).
 * -DEOS -DBROKEN_EOS: the open does not read the markers; spin must find
 * a violation of S3. -DEOS -DBROKEN_FENCE: the open does not fence the
 * slot's last producer; spin must find a violation of S3 too.
 * -DEOS -DBROKEN_SWITCH: step 5 moves the checkpoint before step 4's
 * markers are recorded; spin must find a violation of S3.
 */

#ifndef MAXX
#define MAXX 2 /* session expiries */
#endif
#ifndef MAXC
#define MAXC 1 /* crashes */
#endif
#ifndef MAXH
#define MAXH 2 /* handovers requested by the master */
#endif
#ifndef MAXF
#define MAXF 1 /* EOS: fatal producer errors */
#endif
/* Epochs the faults can use up: the first assignment, two per expiry or
 * crash (given to nobody, then to someone), one per handover. */
#define MAXE (1 + 2 * (MAXX + MAXC) + MAXH)

#define NONE 0
#define other(w) (3 - (w))

/* Redis: the task's place */
#define R_DUE 1
#define R_INFL 2
#define R_GONE 3
/* DB status */
#define DB_SCHED 0
#define DB_DELIV 1
/* what a worker holds of T */
#define H_NONE 0
#define H_CLAIMED 1
#define H_PUBLISHED 2
#define H_TXN 3 /* EOS: in an open transaction */

/* ZooKeeper */
byte zOwner, zReq, zE, zVer;
bool zAlive[3];

/* Redis */
byte rFence;
byte rT = R_DUE;
byte rHolder;

/* DB */
byte dbFence;
byte dbSt = DB_SCHED;

/* Workers' memory */
bool owned[3], fresh[3], releasing[3], dbFencePending[3];
byte myE[3];
byte vOwner[3], vReq[3], vE[3], vVer[3];
bool vValid[3];
byte pend[3];   /* epoch of a claim in flight to Redis, 0: none */
bool pendLive[3]; /* its sender is still the same process (no crash) */
byte held[3], hE[3];

#ifdef EOS
/* Kafka: each worker incarnation's transactional id, the marker partition */
#define NTX 6		    /* ids 2..5: TX(w) = 2w + incarnation */
#define TX(w) (2 * (w) + inc[w])
bool kOpen[NTX];    /* per id: a transaction holding T is open */
bool kMarker;	    /* T's marker committed */
byte kMPart;	    /* the partition it is in */
byte kMTx;	    /* the producer that committed it */
byte sPart;	    /* DB: the partition of the slot's checkpoint (0: the
		     * slot's own, which no producer writes any more) */
bool ckptPast;	    /* the checkpoint is past T's marker (in sPart) */
byte rdPart[3];	    /* step 1's sPart */
bool rdPast[3];	    /* step 1's checkpoint was past T's marker */
bool xPast[3];	    /* step 4: T's marker was in our partition, before the
		     * end step 4 saw (the checkpoint step 5 writes) */
byte kCommits;	    /* ghost: committed records of T */
byte sTx;	    /* DB: the slot's last producer (0: none) */
byte inc[3];	    /* each worker's incarnation */
bool pOk[3];	    /* its producer is made */
bool pValid[3];	    /* its producer's epoch is the coordinator's (not
		     * fenced since it was made) */
bool ready[3];	    /* eos_slot_ready */
byte op[3];	    /* the open's step */
byte rdTx[3];	    /* step 1's sTx */
bool gainWait[3];   /* opened by a gain: waits until nothing is held */
bool beenReady[3];  /* ready since the gain: a claim of this ownership */
bool clrd[3];	    /* handover: eos_release done */
byte nFatal, nAbort;
#define O_IDLE 0
#define O_READ 1
#define O_FENCED 2
#define O_CLAIMED 3
#define O_SWITCH 4
#ifdef SHARED
#define PART(w) 1
#else
#define PART(w) (w)
#endif
/* the checkpoint is past T's marker: only where the marker is */
#define PAST (kMarker && kMPart == sPart && ckptPast)
#define READY(w) ready[w]
#define UNREADY(w) ready[w] = false; op[w] = O_IDLE
#define CLEARED(w) clrd[w]
#else
#define READY(w) true
#define UNREADY(w) skip
#define CLEARED(w) true
#endif

/* Ghosts (checks only) */
byte started;      /* highest epoch whose owner raised the fence */
byte pubBy[MAXE + 1];
bool claimed, published;
byte nExp, nCrash, nHand;

#define delivered (dbSt == DB_DELIV && published)

ltl live { [] (claimed -> <> delivered) }

/* The master (with ZooKeeper), session expiry and crashes. */
active proctype Env()
{
	byte w;
end:	do
	/* unowned slot: give it to a live worker */
	:: atomic { zOwner == NONE && (zAlive[1] || zAlive[2]) ->
		if
		:: zAlive[1] -> zOwner = 1
		:: zAlive[2] -> zOwner = 2
		fi;
		zReq = NONE; zE++; zVer++ }
	/* dead owner: give it directly, next epoch */
	:: atomic { zOwner != NONE && !zAlive[zOwner] ->
		if
		:: zAlive[other(zOwner)] -> zOwner = other(zOwner)
		:: else -> zOwner = NONE
		fi;
		zReq = NONE; zE++; zVer++ }
	/* rebalance: ask the live owner to hand over */
	:: atomic { zOwner != NONE && zAlive[zOwner] &&
		zAlive[other(zOwner)] && zReq == NONE && nHand < MAXH ->
		zReq = other(zOwner); zVer++; nHand++ }
	/* the requested worker died: take the request back */
	:: atomic { zReq != NONE && !zAlive[zReq] -> zReq = NONE; zVer++ }
	/* session expiry (partition, SIGSTOP): the worker self-fenced first */
	:: atomic { nExp < MAXX ->
		if
		:: w = 1
		:: w = 2
		fi;
		if
		:: zAlive[w] -> zAlive[w] = false; fresh[w] = false; nExp++
		:: else -> skip
		fi }
	/* kill -9: memory gone; a claim already sent may still run */
	:: atomic { nCrash < MAXC ->
		if
		:: w = 1
		:: w = 2
		fi;
		if
		:: zAlive[w] ->
			zAlive[w] = false; fresh[w] = false; owned[w] = false;
			releasing[w] = false; dbFencePending[w] = false;
			held[w] = H_NONE; pendLive[w] = false; vValid[w] = false;
			UNREADY(w); nCrash++;
#ifdef EOS
			/* the restarted process has an id of its own; the old
			 * one's open transaction stays open until fenced or
			 * timed out */
			inc[w]++; pOk[w] = false; pValid[w] = false;
			beenReady[w] = false;
			gainWait[w] = false
#endif
			skip
		:: else -> skip
		fi }
#ifdef EOS
	/* the transaction coordinator aborts an open transaction (its
	 * timeout) */
	:: atomic { nAbort < 1 &&
		(kOpen[2] || kOpen[3] || kOpen[4] || kOpen[5]) ->
		if
		:: kOpen[2] -> kOpen[2] = false
		:: kOpen[3] -> kOpen[3] = false
		:: kOpen[4] -> kOpen[4] = false
		:: kOpen[5] -> kOpen[5] = false
		fi;
		nAbort++ }
#endif
	/* Redis runs a claim in flight (SCRIPT_CLAIM) */
	:: atomic { pend[1] != 0 || pend[2] != 0 ->
		if
		:: pend[1] != 0 -> w = 1
		:: pend[2] != 0 -> w = 2
		fi;
#ifndef BROKEN
		if
		:: rFence > pend[w] -> goto refused
		:: else -> skip
		fi;
#endif
		if
		:: rFence < pend[w] -> rFence = pend[w]
		:: else -> skip
		fi;
		if
		:: rT == R_DUE ->
			assert(pend[w] >= started);	/* S2 */
			rT = R_INFL; rHolder = w; claimed = true;
			if
			:: pendLive[w] -> held[w] = H_CLAIMED; hE[w] = pend[w]
			:: else -> skip
			fi
		:: else -> skip
		fi;
refused:
		pend[w] = 0; pendLive[w] = false }
	od
}

proctype Worker(byte me)
{
end:	do
	/* (re)connect: a new session, registered, nothing owned (the old
	 * session's loss: lose_all; phase: owned -> idle, starting -> idle,
	 * draining -> idle, handing -> idle) */
	:: atomic { !zAlive[me] ->
		zAlive[me] = true; fresh[me] = true; owned[me] = false;
		releasing[me] = false; vValid[me] = false; UNREADY(me) }
	/* a watch fired: re-read the slot node */
	:: atomic { fresh[me] && (!vValid[me] || vVer[me] != zVer) ->
		vOwner[me] = zOwner; vReq[me] = zReq; vE[me] = zE;
		vVer[me] = zVer; vValid[me] = true }
	/* slot_reconcile: reassigned or epoch changed -> lose
	 * (phase: owned -> idle) */
	:: atomic { owned[me] && vValid[me] &&
		(vOwner[me] != me || vE[me] != myE[me]) ->
		owned[me] = false; UNREADY(me) }
	/* slot_gain + redis_fence_cb: fence, then claim; DB fence async
	 * (phase: idle -> starting -> owned; fenced: starting -> idle) */
	:: atomic { fresh[me] && vValid[me] && vOwner[me] == me &&
		vReq[me] == NONE && !owned[me] && !releasing[me] ->
		if
		:: rFence > vE[me] -> vValid[me] = false /* fenced: re-read */
		:: else ->
			rFence = vE[me]; myE[me] = vE[me]; owned[me] = true;
			dbFencePending[me] = true;
#ifdef EOS
			gainWait[me] = true; beenReady[me] = false;
#endif
			if
			:: started < myE[me] -> started = myE[me]
			:: else -> skip
			fi
		fi }
	:: atomic { dbFencePending[me] ->
		if
		:: dbFence < myE[me] -> dbFence = myE[me]
		:: else -> skip
		fi;
		dbFencePending[me] = false }
	/* begin_release: handover requested (owned or just restarted and
	 * still named owner), stop claiming (phase: owned -> draining,
	 * idle -> draining, starting -> draining: a start is atomic here) */
	:: atomic { fresh[me] && vValid[me] && vOwner[me] == me &&
		vReq[me] != NONE && vReq[me] != me && !releasing[me] ->
		owned[me] = false; releasing[me] = true; UNREADY(me);
#ifdef EOS
		clrd[me] = false;
#endif
		skip }
#ifdef EOS
	/* eos_release: drained, our producer taken out of the slot's
	 * record (for our epoch), so the next owner fences nobody */
	:: atomic { releasing[me] && fresh[me] && pend[me] == 0 &&
		held[me] == H_NONE && !clrd[me] ->
		if
		:: sTx == TX(me) && dbFence == myE[me] -> sTx = 0
		:: else -> skip
		fi;
		clrd[me] = true }
#endif
	/* try_finish_release: drained, versioned write of the next epoch
	 * (phase: draining -> handing -> idle; the version moved: handing
	 * -> draining -> idle, the write failed, then the re-read node
	 * drops or cancels the handover) */
	:: atomic { releasing[me] && fresh[me] && pend[me] == 0 &&
		held[me] == H_NONE && CLEARED(me) ->
		if
		:: zVer == vVer[me] && vReq[me] != NONE ->
			zOwner = vReq[me]; zReq = NONE; zE++; zVer++
		:: else -> skip	/* version moved */
		fi;
		vValid[me] = false; /* release_done_cb: read_slot */
		releasing[me] = false;
#ifdef EOS
		clrd[me] = false;
#endif
		skip }
	/* scanner: send a claim for the due task (coord_may_claim) */
	:: atomic { owned[me] && fresh[me] && pend[me] == 0 &&
		held[me] == H_NONE && rT == R_DUE && READY(me) ->
		pend[me] = myE[me]; pendLive[me] = true }
#ifndef EOS
	/* firing_publish_task: to Kafka under the claim's epoch */
	:: atomic { held[me] == H_CLAIMED ->
		assert(pubBy[hE[me]] == NONE || pubBy[hE[me]] == me); /* S1 */
		pubBy[hE[me]] = me; published = true; held[me] = H_PUBLISHED }
#else
	/* the producer made (again): bumps our id's epoch, aborting what an
	 * earlier instance of ours left open */
	:: atomic { zAlive[me] && !pOk[me] ->
		kOpen[TX(me)] = false; pValid[me] = true; pOk[me] = true }
	/* a fatal producer error (any slot's transaction): every slot opens
	 * again (producer_lost); T in our open transaction goes back */
	:: atomic { pOk[me] && nFatal < MAXF ->
		nFatal++; pOk[me] = false; pValid[me] = false; UNREADY(me);
		if
		:: held[me] == H_TXN -> held[me] = H_NONE
		:: else -> skip
		fi }
	/* open 1 (SJ_READ): raise the DB fence, read the slot's producer; on
	 * a gain, once nothing of the slot is held */
	:: atomic { owned[me] && fresh[me] && !ready[me] && op[me] == O_IDLE &&
		(!gainWait[me] || held[me] == H_NONE) ->
		gainWait[me] = false;
		if
		:: dbFence < myE[me] -> dbFence = myE[me]
		:: else -> skip
		fi;
		if
		:: dbFence > myE[me] -> skip /* a newer owner's: retried */
		:: else -> rdTx[me] = sTx; rdPart[me] = sPart; rdPast[me] = PAST;
			op[me] = O_READ
		fi }
	/* open 2 (run_fence): init_transactions with the slot's last
	 * producer's id, unless it is ours */
	:: atomic { owned[me] && op[me] == O_READ ->
#ifndef BROKEN_FENCE
		if
		:: rdTx[me] != 0 && rdTx[me] != TX(me) ->
			kOpen[rdTx[me]] = false;
			if
			:: TX(1) == rdTx[me] -> pValid[1] = false
			:: TX(2) == rdTx[me] -> pValid[2] = false
			:: else -> skip	/* a crashed incarnation's */
			fi
		:: else -> skip
		fi;
#endif
		rdTx[me] = 0; op[me] = O_FENCED }
	/* open 3 (SJ_CLAIM): ours recorded as the slot's producer, for our
	 * epoch, with our producer made */
	:: atomic { owned[me] && op[me] == O_FENCED && pOk[me] ->
		if
		:: dbFence == myE[me] -> sTx = TX(me); op[me] = O_CLAIMED
		:: else -> op[me] = O_IDLE /* read again */
		fi }
	/* open 4 (run_read -> apply_found): read the markers from the
	 * checkpoint (step 1's), record what they show; ready if the
	 * checkpoint is in our partition, else step 5 */
	:: atomic { owned[me] && op[me] == O_CLAIMED ->
		xPast[me] = kMarker && kMPart == PART(me);
#ifndef BROKEN_EOS
		if
		:: kMarker && kMPart == rdPart[me] && !rdPast[me] ->
			/* the delivered update (fenced) and forget */
			if
			:: dbFence <= myE[me] && dbSt == DB_SCHED ->
				dbSt = DB_DELIV
			:: else -> skip
			fi;
			rT = R_GONE;
			/* the read's batch: the checkpoint passes it only in
			 * our partition (SQL_EOS_CKPT_SET ... eos_part) */
			if
			:: dbFence <= myE[me] && dbSt == DB_DELIV &&
			   sPart == PART(me) && kMPart == sPart ->
				ckptPast = true
			:: else -> skip
			fi
		:: else -> skip
		fi;
#endif
		if
		:: rdPart[me] == PART(me) ->
			op[me] = O_IDLE; ready[me] = true; beenReady[me] = true
		:: else -> op[me] = O_SWITCH
		fi }
	/* open 5 (SJ_SWITCH): the checkpoint to our partition, at its end as
	 * step 4 saw it, for our epoch and producer; else read again */
	:: atomic { owned[me] && op[me] == O_SWITCH ->
		if
		:: dbFence == myE[me] && sTx == TX(me) ->
			sPart = PART(me); ckptPast = xPast[me];
			op[me] = O_IDLE; ready[me] = true; beenReady[me] = true
		:: else -> op[me] = O_IDLE
		fi }
#ifdef BROKEN_SWITCH
	/* step 5 taken before step 4 recorded anything */
	:: atomic { owned[me] && op[me] == O_CLAIMED &&
		rdPart[me] != PART(me) && dbFence == myE[me] && sTx == TX(me) ->
		sPart = PART(me); ckptPast = kMarker && kMPart == PART(me);
		op[me] = O_IDLE; ready[me] = true; beenReady[me] = true }
#endif
	/* advance with nothing of the slot unrecorded: the checkpoint to
	 * past our last commit (committed_end), for our epoch, in our
	 * partition */
	:: atomic { ready[me] && held[me] == H_NONE && sPart == PART(me) &&
		kMarker && kMTx == TX(me) && kMPart == PART(me) &&
		dbFence == myE[me] && !ckptPast ->
		ckptPast = true }
	/* eos_publish -> run_send: the record and its marker in a
	 * transaction begun with this worker's producer epoch; a task
	 * claimed under an older ownership (an older epoch, or the same one
	 * before a lost session: not ready since the gain) is not published;
	 * one of this ownership waits while the slot opens again */
	:: atomic { held[me] == H_CLAIMED &&
		(ready[me] || !owned[me] || hE[me] != myE[me] ||
		 !beenReady[me]) ->
		if
		:: owned[me] && ready[me] && pOk[me] && hE[me] == myE[me] ->
			kOpen[TX(me)] = true;
			held[me] = H_TXN
		:: else -> held[me] = H_NONE
		fi }
	/* commit_transaction: refused for a fenced producer (a zombie woken
	 * after the next owner's fence: fatal, made again) or an aborted
	 * transaction (its task stays in flight); a commit may succeed
	 * unseen (fatal, outcome unknown) */
	:: atomic { held[me] == H_TXN ->
		if
		:: kOpen[TX(me)] && pValid[me] ->
			kOpen[TX(me)] = false; kMarker = true; kCommits++;
			kMPart = PART(me); kMTx = TX(me);
			assert(kCommits <= 1);	/* S3 */
			assert(pubBy[hE[me]] == NONE || pubBy[hE[me]] == me); /* S1 */
			pubBy[hE[me]] = me; published = true;
			if
			:: held[me] = H_PUBLISHED
			:: nFatal < MAXF ->
				nFatal++; held[me] = H_NONE; pOk[me] = false;
				pValid[me] = false; UNREADY(me)
			fi
		:: else ->
			held[me] = H_NONE;
			if
			:: !pValid[me] -> pOk[me] = false; UNREADY(me)
			:: else -> skip
			fi
		fi }
#endif
	/* delivery report -> mark_run (DB fence) -> forget */
	:: atomic { held[me] == H_PUBLISHED ->
		if
		:: dbFence <= hE[me] && dbSt == DB_SCHED -> dbSt = DB_DELIV
		:: else -> skip	/* fenced, or already final */
		fi;
		/* SCRIPT_FORGET drops the in-flight entry and the payload: a
		 * copy in due (requeued meanwhile) can no longer be claimed */
		rT = R_GONE;
#ifdef EOS
		/* advance: the checkpoint passes the marker, for an epoch the
		 * DB still allows, in our partition */
		if
		:: dbSt == DB_DELIV && dbFence <= hE[me] && sPart == PART(me) &&
		   kMPart == sPart -> ckptPast = true
		:: else -> skip
		fi;
#endif
		held[me] = H_NONE }
	/* reap_slot: a lease ran out (holder gone or stale) */
	:: atomic { owned[me] && fresh[me] && rT == R_INFL &&
		!(rHolder == me && (held[me] != H_NONE || pend[me] != 0)) ->
		rT = R_DUE }
	/* sweep_slot: overdue in the DB, missing from Redis */
	:: atomic { owned[me] && fresh[me] && rT == R_GONE &&
		dbSt == DB_SCHED && held[me] == H_NONE ->
		rT = R_DUE }
	od
}

init
{
	atomic {
		zAlive[1] = true; fresh[1] = true;
		zAlive[2] = true; fresh[2] = true;
		run Worker(1);
		run Worker(2)
	}
}
