//! The live policy on a stream thread: the instance's latest version is picked up at every
//! loop turn; each owned partition switches to it before its next event, recording where
//! (`Part::switch_policy`), inside the open batch's transaction.

use super::Worker;
use rdkafka::error::KafkaError;

impl Worker {
    /// Takes the instance's latest policy version when it is newer than the thread's.
    pub fn poll_policy(&mut self) {
        let feed = &self.shared.policy;
        if feed.seq() <= self.live.seq {
            return;
        }
        if let Some(latest) = feed.latest().filter(|l| l.seq > self.live.seq) {
            tracing::info!(thread = %self.thread, version = %latest.version(), seq = latest.seq, "stream thread picked up a policy version");
            self.live = latest;
            self.note_policy();
        }
    }

    /// Shows the thread's version on the admin endpoint.
    fn note_policy(&self) {
        self.shared.policy.threads.insert(
            self.thread.clone(),
            (self.live.seq, self.live.version().to_string()),
        );
    }

    pub(super) fn with_policy_noted(self) -> Self {
        self.note_policy();
        self
    }

    /// Before `partition`'s record at `offset`: switches the partition to the thread's
    /// version when it is judged by an older one (or by one never recorded).
    pub(super) fn apply_policy(&mut self, partition: i32, offset: i64) -> Result<(), KafkaError> {
        let Some(part) = self.parts.get_mut(&partition) else {
            return Ok(());
        };
        if part.policy_seq >= self.live.seq {
            return Ok(());
        }
        // The checkpoint of the switch is taken mid-batch: the sessions the open batch
        // changed so far must be in it as they are now, as a commit's checkpoint has them.
        let (touched, removed) = part.collect_changes();
        self.shared
            .refresh_summaries(partition, &part.engine, touched, removed);
        let change = part.switch_policy(
            self.producer.producer(),
            &self.cfg.kafka.state_topic,
            partition,
            offset,
            &self.live,
        )?;
        tracing::info!(
            partition,
            from_offset = change.from_offset,
            version = %change.version,
            seq = change.seq,
            "policy version in force on the partition"
        );
        self.shared
            .policy
            .partitions
            .insert(partition, (change.seq, change.version, change.from_offset));
        Ok(())
    }
}
