//! `--push URL --every 10s` of `lopi run` and `lopi attach`: while the program runs, a thread
//! of lopi's reads the data file every interval and sends what happened since the window
//! before (`lopi_trace::otlp::Windows`) to an OpenTelemetry Collector over OTLP/HTTP. Windows
//! wait in a bounded queue on disk while the collector is away, and go, oldest first, once it
//! is back. The last window is made once the recording has ended, so that the windows add up
//! to the data file.
use crate::names::Namer;
use crate::otlp::{HostFacts, ResourceArgs};
use crate::push::{Attempt, ConnectArgs, Pusher};
use crate::queue::Queue;
use anyhow::Result;
use lopi_trace::otlp::Windows;
use prost::Message;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the last windows are tried for, once the program has ended, while the collector
/// is away.
const LAST_TRIES_FOR: Duration = Duration::from_secs(10);
/// Time between those tries.
const LAST_TRIES_EVERY: Duration = Duration::from_millis(500);

/// `--push` and what goes with it.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct PushArgs {
    /// While the program runs, push its profile to an OpenTelemetry Collector (OTLP/HTTP
    /// address, http://127.0.0.1:4318): every --every, what happened since the push before.
    /// Timing's --budget is 2% of each thread's CPU time unless given.
    #[arg(long, value_name = "URL")]
    pub(crate) push: Option<String>,
    /// How often --push sends what happened (10s, 500ms, 1m).
    #[arg(long, value_name = "DURATION", value_parser = crate::live::parse_duration, default_value = "10s")]
    every: Duration,
    /// Where --push's windows wait while the collector is away; windows an earlier run left
    /// there go first [default: the data file's path with .queue added].
    #[arg(long, value_name = "DIR")]
    queue: Option<PathBuf>,
    /// The most --push's queue holds (64M, 512k); past it the oldest windows are dropped, and
    /// counted.
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = crate::queue::parse_size)]
    queue_size: u64,
    #[command(flatten)]
    resource: ResourceArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

impl PushArgs {
    /// The arguments for one of several recordings pushed at once (`lopi agent`): a queue
    /// directory given is shared out, a subdirectory per data file.
    pub(crate) fn for_process(&self, data: &std::path::Path) -> PushArgs {
        let name = data.file_name().map_or("lopi".into(), |n| n.to_string_lossy().into_owned());
        PushArgs { queue: self.queue.as_ref().map(|q| q.join(format!("{name}.queue"))), ..self.clone() }
    }
}

/// Timing's budget when --push is given without --budget, in parts per million.
pub(crate) const PUSH_BUDGET_PPM: u32 = 20_000;

/// The pushing thread, running.
pub(crate) struct Continuous {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Pushed>,
    /// The collector's profiles endpoint, for the summary.
    endpoint: String,
    quiet: bool,
}

/// What a continuous push did.
struct Pushed {
    windows: u64,
    sent: u64,
    bytes: u64,
    refused: u64,
    queue: Queue,
    /// Why the data file could not be read at the end.
    unread: Option<String>,
}

impl Continuous {
    /// Starts pushing the recording `data` as `args` asks, when it asks to.
    pub(crate) fn start(args: &PushArgs, data: &str, quiet: bool) -> Result<Option<Continuous>> {
        let Some(url) = &args.push else { return Ok(None) };
        if args.every < Duration::from_millis(100) {
            anyhow::bail!("--every {:?} is too often: a window every 100 ms at most", args.every);
        }
        let pusher = Pusher::new(url, &args.connect)?;
        let dir = args.queue.clone().unwrap_or_else(|| PathBuf::from(format!("{data}.queue")));
        let queue = Queue::open(&dir, args.queue_size)?;
        if !quiet {
            let waiting = match queue.len() {
                0 => String::new(),
                n => format!("; {n} windows an earlier run left in {} go first", dir.display()),
            };
            eprintln!("lopi: pushing to {} every {}{waiting}", pusher.endpoint(), seconds(args.every));
        }
        let endpoint = pusher.endpoint().to_string();
        let worker = Worker {
            data: PathBuf::from(data),
            every: args.every,
            resource: args.resource.clone(),
            pusher,
            facts: HostFacts::default(),
            windows: Windows::new(),
            away: None,
            quiet,
            pushed: Pushed { windows: 0, sent: 0, bytes: 0, refused: 0, queue, unread: None },
        };
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new().name("lopi-push".into()).spawn(move || worker.run(stopped))?;
        Ok(Some(Continuous { stop, thread, endpoint, quiet }))
    }

    /// Once the recording has ended: the last window, the queue emptied while the collector
    /// takes it (for up to 10 s), and what was pushed.
    pub(crate) fn finish(self) -> Delivery {
        let _ = self.stop.send(());
        let Ok(p) = self.thread.join() else {
            eprintln!("lopi: the pushing thread failed; what it did not send is in the queue");
            return Delivery { windows: 0, sent: 0, whole: false };
        };
        if let Some(why) = &p.unread {
            eprintln!("lopi: the last window was not made: {why}");
        }
        if !self.quiet {
            eprintln!("lopi: pushed {} of {} windows to {} ({} bytes)", p.sent, p.windows, self.endpoint, p.bytes);
        }
        if p.refused > 0 {
            eprintln!("lopi: warning: the collector refused {} windows (said above); they are lost", p.refused);
        }
        if p.queue.dropped > 0 {
            eprintln!(
                "lopi: warning: {} windows ({} bytes) were dropped: the queue in {} was full (--queue-size)",
                p.queue.dropped,
                p.queue.dropped_bytes,
                p.queue.dir().display()
            );
        }
        if p.queue.len() > 0 {
            eprintln!(
                "lopi: warning: {} windows could not be delivered and wait in {}: a `--push` with `--queue {}` sends them first",
                p.queue.len(),
                p.queue.dir().display(),
                p.queue.dir().display()
            );
        }
        let whole = p.unread.is_none() && p.queue.len() == 0 && p.queue.dropped == 0 && p.refused == 0;
        p.queue.close();
        Delivery { windows: p.windows, sent: p.sent, whole }
    }
}

/// What a finished push delivered.
pub(crate) struct Delivery {
    pub(crate) windows: u64,
    pub(crate) sent: u64,
    /// Every window made reached the collector, the last one included.
    pub(crate) whole: bool,
}

struct Worker {
    data: PathBuf,
    every: Duration,
    resource: ResourceArgs,
    pusher: Pusher,
    facts: HostFacts,
    windows: Windows,
    /// Why the collector could not be reached, while it cannot.
    away: Option<String>,
    quiet: bool,
    pushed: Pushed,
}

impl Worker {
    fn run(mut self, stop: mpsc::Receiver<()>) -> Pushed {
        let mut next = Instant::now() + self.every;
        let mut start = unix_ns();
        loop {
            let last = !matches!(stop.recv_timeout(next.saturating_duration_since(Instant::now())), Err(RecvTimeoutError::Timeout));
            self.window(&mut start, last);
            self.deliver(last);
            if last {
                break;
            }
            next += self.every;
            // Behind (a slow read of a big file): the next window a whole interval from now.
            next = next.max(Instant::now());
        }
        self.pushed
    }

    /// Queues what happened since the last window, if anything did.
    fn window(&mut self, start: &mut u64, last: bool) {
        let end = unix_ns();
        // Before the runtime wrote its first record there is nothing to read yet.
        let file = match crate::files::read_data_quietly(&self.data) {
            Ok(f) => f,
            Err(e) => {
                if last {
                    self.pushed.unread = Some(format!("{e:#}"));
                }
                return;
            }
        };
        let mut namer = Namer::new(&file.maps);
        let timing = crate::exports::named_timing(&file, &mut namer).unwrap_or_default();
        let whole = crate::otlp::request(&self.data, &file, &timing, &mut namer, &self.resource, &mut self.facts);
        let window = self.windows.next(whole, *start, end);
        *start = end;
        let Some(window) = window else { return };
        self.pushed.windows += 1;
        if let Err(e) = self.pushed.queue.push(&window.encode_to_vec()) {
            eprintln!("lopi: warning: {e:#}; this window is lost");
        }
    }

    /// Sends the queue, oldest first, while the collector takes it; at the end, tries again
    /// for a while if it is away.
    fn deliver(&mut self, last: bool) {
        let give_up = Instant::now() + LAST_TRIES_FOR;
        while let Some(bytes) = self.pushed.queue.oldest() {
            match self.pusher.try_once(&bytes) {
                Attempt::Done(warning) => {
                    self.pushed.queue.sent_oldest();
                    self.pushed.sent += 1;
                    self.pushed.bytes += bytes.len() as u64;
                    if let Some(w) = warning {
                        eprintln!("lopi: warning: the collector kept only part of a window: {w}");
                    }
                    if self.away.take().is_some() && !self.quiet {
                        eprintln!("lopi: the collector is back; {} windows still wait", self.pushed.queue.len());
                    }
                }
                Attempt::Refused(why) => {
                    self.pushed.queue.sent_oldest();
                    self.pushed.refused += 1;
                    eprintln!("lopi: the collector at {} refused a window: {why}", self.pusher.endpoint());
                }
                Attempt::Again(why) => {
                    if self.away.is_none() && !self.quiet {
                        eprintln!("lopi: the collector at {} is away ({why}); windows wait in {}", self.pusher.endpoint(), self.pushed.queue.dir().display());
                    }
                    self.away = Some(why);
                    if !last || Instant::now() + LAST_TRIES_EVERY > give_up {
                        return;
                    }
                    std::thread::sleep(LAST_TRIES_EVERY);
                }
            }
        }
    }
}

fn unix_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

