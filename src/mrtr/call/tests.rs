//! The driver's rules, one per test, on tokio's paused clock against [`FakeCall`]: a backend
//! call whose events the test pushes and which records what the driver sent back.

use tokio::time::sleep;

use super::fake::{Backend, FakeCall, Sent};
use super::*;
use crate::jsonrpc::codes;
use crate::mrtr::clock::{Clock, FineClock, TokioClock};

const SETTLE: Duration = Duration::from_millis(50);
const QUIET: Duration = Duration::from_millis(5);
const TIMEOUT: Duration = Duration::from_secs(30);
const ROUND_WAIT: Duration = Duration::from_secs(2);

struct Setup {
    scope: RequestScope,
    interruptible: bool,
    unsent: bool,
    /// The backend's message limit, if any.
    message_limit: Option<usize>,
    timeout: Duration,
    settle: Settle,
}

impl Setup {
    fn new(client_capabilities: Value) -> Self {
        Self {
            scope: RequestScope {
                client_capabilities,
                ..RequestScope::default()
            },
            interruptible: true,
            unsent: false,
            message_limit: None,
            timeout: TIMEOUT,
            settle: Settle {
                window: SETTLE,
                quiet: QUIET,
            },
        }
    }

    fn start(self) -> (CallDriver<FakeCall, TokioClock>, Backend) {
        self.start_on()
    }

    /// The same driver on another clock.
    fn start_on<K: Clock>(self) -> (CallDriver<FakeCall, K>, Backend) {
        let (mut call, backend) = FakeCall::new(self.unsent);
        if let Some(bytes) = self.message_limit {
            call = call.with_limit(bytes);
        }
        let driver = CallDriver::new(
            call,
            self.interruptible,
            Some("mrtr-1".into()),
            self.scope,
            self.timeout,
            self.settle,
        );
        (driver, backend)
    }
}

fn scope(client_capabilities: Value) -> RequestScope {
    Setup::new(client_capabilities).scope
}

fn elicit(message: &str) -> Value {
    json!({
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": { "name": { "type": "string" } },
            "required": ["name"]
        }
    })
}

fn accept(name: &str) -> Value {
    json!({ "action": "accept", "content": { "name": name } })
}

fn answers(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

/// A retry's answers checked against what the driver asks, as the bridge checks them.
fn validate<K: Clock>(
    driver: &CallDriver<FakeCall, K>,
    answers: &Map<String, Value>,
) -> Result<ValidatedAnswers, GatewayError> {
    validate_answers(&driver.outstanding_inputs(), answers, None)
}

/// The driver's next step and how long (paused clock) it took.
async fn timed_step(driver: &mut CallDriver<FakeCall, TokioClock>) -> (Step, Duration) {
    let start = Instant::now();
    let step = driver.next_step().await;
    (step, start.elapsed())
}

fn ending(step: Step) -> Ending {
    match step {
        Step::End(ending) => ending,
        Step::Notify(message) => panic!("expected an ending, got notification {message}"),
    }
}

fn notification(step: Step) -> Value {
    match step {
        Step::Notify(message) => message,
        Step::End(ending) => panic!("expected a notification, got {ending:?}"),
    }
}

fn messages<K: Clock>(driver: &CallDriver<FakeCall, K>) -> Vec<(String, String)> {
    driver
        .input_requests()
        .into_iter()
        .map(|(key, request)| {
            let message = request
                .pointer("/params/message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            (key, message)
        })
        .collect()
}

fn pair(key: &str, message: &str) -> (String, String) {
    (key.to_string(), message.to_string())
}

#[tokio::test(start_paused = true)]
async fn questions_back_to_back_make_one_round_closed_by_the_quiet_gap() {
    let (mut driver, backend) = Setup::new(json!({"elicitation": {}})).start();
    backend.ask(1, "elicitation/create", elicit("first"));
    let script = async {
        sleep(Duration::from_millis(3)).await;
        backend.ask(2, "elicitation/create", elicit("second"));
        sleep(Duration::from_millis(20)).await;
        backend.ask(3, "elicitation/create", elicit("third"));
    };
    let ((step, took), ()) = tokio::join!(timed_step(&mut driver), script);
    assert!(matches!(ending(step), Ending::InputRequired));
    assert_eq!(
        took,
        Duration::from_millis(3) + QUIET,
        "the round closes once the backend was quiet for the gap after its last question"
    );
    assert_eq!(
        messages(&driver),
        vec![
            pair("elicitation-1", "first"),
            pair("elicitation-2", "second")
        ]
    );
    driver.parked();

    // The late question makes the next round, on its own.
    let all = answers(&[
        ("elicitation-1", accept("a")),
        ("elicitation-2", accept("b")),
    ]);
    let validated = validate(&driver, &all).unwrap();
    driver.resume(scope(json!({"elicitation": {}})), validated, ROUND_WAIT);
    let (step, took) = timed_step(&mut driver).await;
    assert!(matches!(ending(step), Ending::InputRequired));
    // It arrived while the call was held: the round waits the quiet gap only.
    assert_eq!(took, QUIET);
    assert_eq!(messages(&driver), vec![pair("elicitation-3", "third")]);
}

#[tokio::test(start_paused = true)]
async fn a_lone_question_is_handed_out_after_the_quiet_gap_not_the_window() {
    let (mut driver, backend) = Setup::new(json!({"elicitation": {}})).start();
    backend.ask(1, "elicitation/create", elicit("name?"));
    let (step, took) = timed_step(&mut driver).await;
    assert!(matches!(ending(step), Ending::InputRequired));
    assert_eq!(took, QUIET);
    assert!(took < SETTLE);
    assert_eq!(messages(&driver), vec![pair("elicitation-1", "name?")]);
}

/// The production clock, in real time: the quiet gap is timed on its timerfd, and the round
/// is handed out no sooner than the gap and well before the window.
#[tokio::test]
async fn on_the_fine_clock_the_quiet_gap_is_timed_on_its_timerfd() {
    let (mut driver, backend) = Setup::new(json!({"elicitation": {}})).start_on::<FineClock>();
    backend.ask(1, "elicitation/create", elicit("name?"));
    let start = Instant::now();
    let step = driver.next_step().await;
    let took = start.elapsed();
    assert!(matches!(ending(step), Ending::InputRequired));
    assert!(took >= QUIET, "handed out before the gap: {took:?}");
    assert!(driver.clock.holds_timer(), "the gap ran on the timerfd");
    assert_eq!(messages(&driver), vec![pair("elicitation-1", "name?")]);
    driver.parked();
    assert!(!driver.clock.holds_timer(), "a held round keeps no timerfd");
}

#[tokio::test(start_paused = true)]
async fn a_backend_that_never_goes_quiet_is_cut_off_at_the_window() {
    let mut setup = Setup::new(json!({"elicitation": {}}));
    setup.scope.client_progress_token = Some(json!("p"));
    let (mut driver, backend) = setup.start();
    backend.ask(1, "elicitation/create", elicit("first"));
    // Progress every 4 ms (under the quiet gap) keeps the round gathering; a question arrives
    // in the middle.
    let script = async {
        for tick in 1..=30u32 {
            sleep(Duration::from_millis(4)).await;
            backend.push(CallEvent::Progress(
                json!({ "progressToken": "mrtr-1", "progress": tick }),
            ));
            if tick == 5 {
                backend.ask(2, "elicitation/create", elicit("second"));
            }
        }
    };
    let run = async {
        let start = Instant::now();
        loop {
            match driver.next_step().await {
                Step::Notify(_) => continue,
                Step::End(ending) => break (ending, start.elapsed()),
            }
        }
    };
    let ((ending, took), ()) = tokio::join!(run, script);
    assert!(matches!(ending, Ending::InputRequired));
    assert_eq!(took, SETTLE, "the window bounds the round");
    assert_eq!(
        messages(&driver),
        vec![
            pair("elicitation-1", "first"),
            pair("elicitation-2", "second")
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_zero_quiet_gap_hands_out_what_already_arrived() {
    let mut setup = Setup::new(json!({"elicitation": {}}));
    setup.settle.quiet = Duration::ZERO;
    let (mut driver, backend) = setup.start();
    backend.ask(1, "elicitation/create", elicit("first"));
    backend.ask(2, "elicitation/create", elicit("second"));
    let (step, took) = timed_step(&mut driver).await;
    assert!(matches!(ending(step), Ending::InputRequired));
    assert_eq!(took, Duration::ZERO);
    assert_eq!(messages(&driver).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn round_wait_ends_a_quiet_retry_and_an_event_before_it_wins() {
    let caps = json!({"elicitation": {}});
    let (mut driver, backend) = Setup::new(caps.clone()).start();
    backend.ask(1, "elicitation/create", elicit("name?"));
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::InputRequired
    ));
    driver.parked();

    let validated = validate(&driver, &answers(&[("elicitation-1", accept("ada"))])).unwrap();
    driver.resume(scope(caps.clone()), validated, ROUND_WAIT);
    let (step, took) = timed_step(&mut driver).await;
    assert!(matches!(ending(step), Ending::InputRequired));
    assert_eq!(took, ROUND_WAIT, "neither before nor after the round wait");
    assert!(driver.input_requests().is_empty());
    driver.parked();

    let validated = validate(&driver, &Map::new()).unwrap();
    driver.resume(scope(caps), validated, ROUND_WAIT);
    let script = async {
        sleep(Duration::from_secs(1)).await;
        backend.answer();
    };
    let ((step, took), ()) = tokio::join!(timed_step(&mut driver), script);
    assert!(matches!(ending(step), Ending::Final(Ok(_))));
    assert_eq!(took, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_valid_preanswer_is_delivered_without_a_round() {
    let mut setup = Setup::new(json!({"elicitation": {}}));
    setup.scope.preanswers = answers(&[("elicitation-1", accept("ada"))]);
    let (mut driver, backend) = setup.start();
    backend.ask(7, "elicitation/create", elicit("name?"));
    backend.answer();
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::Final(Ok(_))
    ));
    assert_eq!(driver.round, 0);
    assert_eq!(backend.responses_to(7), vec![Ok(accept("ada"))]);
}

/// A preanswer that does not hold, or that the backend could not take, is not delivered: the
/// question goes to the client.
#[tokio::test(start_paused = true)]
async fn a_preanswer_not_delivered_leaves_the_request_to_the_client() {
    let wrong_type = json!({ "action": "accept", "content": { "name": 5 } });
    let too_large = accept(&"a".repeat(300));
    for (preanswer, message_limit) in [(wrong_type, None), (too_large, Some(200))] {
        let mut setup = Setup::new(json!({"elicitation": {}}));
        setup.message_limit = message_limit;
        setup.scope.preanswers = answers(&[("elicitation-1", preanswer.clone())]);
        let (mut driver, backend) = setup.start();
        backend.ask(7, "elicitation/create", elicit("name?"));
        assert!(
            matches!(ending(driver.next_step().await), Ending::InputRequired),
            "{preanswer}"
        );
        assert_eq!(messages(&driver), vec![pair("elicitation-1", "name?")]);
        assert!(backend.responses_to(7).is_empty(), "{preanswer}");
    }
}

/// Two questions in one round.
async fn two_questions() -> (CallDriver<FakeCall, TokioClock>, Backend) {
    let (mut driver, backend) = Setup::new(json!({"elicitation": {}})).start();
    backend.ask(1, "elicitation/create", elicit("first"));
    backend.ask(2, "elicitation/create", elicit("second"));
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::InputRequired
    ));
    assert_eq!(driver.input_requests().len(), 2);
    driver.parked();
    (driver, backend)
}

#[tokio::test(start_paused = true)]
async fn one_bad_answer_refuses_all_and_the_backend_hears_nothing() {
    let (driver, backend) = two_questions().await;
    let bad = json!({ "action": "accept", "content": {} });
    let retry = answers(&[("elicitation-1", accept("a")), ("elicitation-2", bad)]);
    match validate(&driver, &retry) {
        Err(GatewayError::InvalidParams { data, .. }) => {
            assert_eq!(data, Some(json!({ "key": "elicitation-2" })));
        }
        Err(other) => panic!("expected invalid params, got {other:?}"),
        Ok(_) => panic!("a bad answer was accepted"),
    }
    assert_eq!(backend.sent(), vec![]);
    assert_eq!(driver.input_requests().len(), 2, "nothing was taken");
}

#[tokio::test(start_paused = true)]
async fn resumed_answers_reach_the_backend_exactly_once() {
    let (mut driver, backend) = two_questions().await;
    let retry = answers(&[
        ("elicitation-1", accept("a")),
        ("elicitation-2", accept("b")),
    ]);
    let validated = validate(&driver, &retry).unwrap();
    driver.resume(scope(json!({"elicitation": {}})), validated, ROUND_WAIT);
    backend.answer();
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::Final(Ok(_))
    ));
    drop(driver);
    assert_eq!(backend.responses_to(1), vec![Ok(accept("a"))]);
    assert_eq!(backend.responses_to(2), vec![Ok(accept("b"))]);
}

#[tokio::test(start_paused = true)]
async fn a_question_withdrawn_while_held_is_never_answered() {
    let (mut driver, backend) = two_questions().await;
    let retry = answers(&[
        ("elicitation-1", accept("a")),
        ("elicitation-2", accept("b")),
    ]);
    // Validated before the driver sees the withdrawal, as when it arrives during the retry.
    let validated = validate(&driver, &retry).unwrap();
    backend.withdraw(1);
    driver.resume(scope(json!({"elicitation": {}})), validated, ROUND_WAIT);
    backend.answer();
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::Final(Ok(_))
    ));
    drop(driver);
    assert!(backend.responses_to(1).is_empty());
    assert_eq!(backend.responses_to(2), vec![Ok(accept("b"))]);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_driver_answers_or_releases_what_it_holds() {
    let (mut driver, backend) = Setup::new(json!({"elicitation": {}, "sampling": {}})).start();
    backend.ask(1, "elicitation/create", elicit("name?"));
    let sampling = json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": "hi" } }],
        "maxTokens": 10
    });
    backend.ask(2, "sampling/createMessage", sampling);
    backend.ask_deferred(3, "elicitation/create", Some(elicit("idle question")));
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::InputRequired
    ));
    assert_eq!(driver.input_requests().len(), 3);
    drop(driver);
    let sent = backend.sent();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(
        sent[0],
        Sent::Respond(json!(1), Ok(json!({ "action": "cancel" })))
    );
    match &sent[1] {
        Sent::Respond(id, Err(error)) => {
            assert_eq!(id, &json!(2));
            assert_eq!(error.code, codes::INTERNAL_ERROR);
        }
        other => panic!("expected an error for the sampling request, got {other:?}"),
    }
    assert_eq!(
        sent[2],
        Sent::Release(json!(3), "elicitation/create".into())
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_backend_fails_at_the_request_timeout() {
    let mut setup = Setup::new(json!({}));
    setup.timeout = Duration::from_secs(5);
    let (mut driver, _backend) = setup.start();
    let (step, took) = timed_step(&mut driver).await;
    assert!(matches!(
        ending(step),
        Ending::Failed(GatewayError::BackendTimeout(_))
    ));
    assert_eq!(took, Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn an_undeclared_capability_is_refused_and_reported() {
    let (mut driver, backend) = Setup::new(json!({})).start();
    backend.ask(1, "elicitation/create", elicit("name?"));
    backend.push(CallEvent::Final(Err(JsonRpcError::new(
        codes::INTERNAL_ERROR,
        "the tool needed an answer",
    ))));
    match ending(driver.next_step().await) {
        Ending::Failed(GatewayError::MissingCapability { required }) => {
            assert_eq!(required, json!({"elicitation": {}}));
        }
        other => panic!("expected a missing capability, got {other:?}"),
    }
    assert!(driver.input_requests().is_empty());
    let responses = backend.responses_to(1);
    assert!(
        matches!(responses.as_slice(), [Err(e)] if e.code == codes::METHOD_NOT_FOUND),
        "{responses:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_that_cannot_be_interrupted_hands_questions_back() {
    let mut setup = Setup::new(json!({"elicitation": {}}));
    setup.interruptible = false;
    let (mut driver, backend) = setup.start();
    backend.ask(1, "elicitation/create", elicit("name?"));
    backend.answer();
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::Final(Ok(_))
    ));
    assert_eq!(
        backend.sent(),
        vec![Sent::Release(json!(1), "elicitation/create".into())]
    );
}

#[tokio::test(start_paused = true)]
async fn progress_is_relayed_under_the_clients_token_only() {
    let mut setup = Setup::new(json!({}));
    setup.scope.client_progress_token = Some(json!(7));
    let (mut driver, backend) = setup.start();
    for (token, progress) in [("mrtr-1", 1), ("another-call", 2), ("mrtr-1", 3)] {
        backend.push(CallEvent::Progress(
            json!({ "progressToken": token, "progress": progress }),
        ));
    }
    backend.answer();
    for progress in [1, 3] {
        let message = notification(driver.next_step().await);
        assert_eq!(message["method"], "notifications/progress");
        assert_eq!(
            message["params"],
            json!({ "progressToken": 7, "progress": progress })
        );
    }
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::Final(Ok(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn logs_below_the_requested_level_are_dropped() {
    let mut setup = Setup::new(json!({}));
    setup.scope.log_level = Some("warning".into());
    let (mut driver, backend) = setup.start();
    for (level, data) in [
        ("info", "a"),
        ("error", "b"),
        ("debug", "c"),
        ("warning", "d"),
    ] {
        backend.push(CallEvent::Log(json!({ "level": level, "data": data })));
    }
    backend.answer();
    for data in ["b", "d"] {
        let message = notification(driver.next_step().await);
        assert_eq!(message["method"], "notifications/message");
        assert_eq!(message["params"]["data"], data);
    }
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::Final(Ok(_))
    ));
}

/// A call held back by a roots question the backend asked before it.
async fn roots_prelude() -> (CallDriver<FakeCall, TokioClock>, Backend) {
    let mut setup = Setup::new(json!({"roots": {}}));
    setup.unsent = true;
    let (mut driver, backend) = setup.start();
    backend.ask_deferred(1, "roots/list", None);
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::InputRequired
    ));
    assert_eq!(driver.input_requests().len(), 1);
    assert_eq!(backend.sent(), vec![], "the call waits for its prelude");
    driver.parked();
    (driver, backend)
}

#[tokio::test(start_paused = true)]
async fn a_prelude_call_is_sent_after_its_roots_and_a_barrier() {
    let (mut driver, backend) = roots_prelude().await;
    let roots = json!({ "roots": [{ "uri": "file:///work" }] });
    let validated = validate(&driver, &answers(&[("roots-1", roots.clone())])).unwrap();
    driver.resume(scope(json!({"roots": {}})), validated, ROUND_WAIT);
    let script = async {
        sleep(Duration::from_millis(10)).await;
        backend.answer();
    };
    let (step, ()) = tokio::join!(driver.next_step(), script);
    assert!(matches!(ending(step), Ending::Final(Ok(_))));
    assert_eq!(
        backend.sent(),
        vec![
            Sent::Respond(json!(1), Ok(roots)),
            Sent::NoteRoots,
            Sent::Barrier,
            Sent::Send
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_prelude_roots_question_withdrawn_unanswered_fails_the_call_unsent() {
    let (mut driver, backend) = roots_prelude().await;
    backend.withdraw(1);
    let roots = json!({ "roots": [{ "uri": "file:///work" }] });
    let validated = validate(&driver, &answers(&[("roots-1", roots)])).unwrap();
    driver.resume(scope(json!({"roots": {}})), validated, ROUND_WAIT);
    assert!(matches!(
        ending(driver.next_step().await),
        Ending::Failed(GatewayError::Busy(_))
    ));
    drop(driver);
    assert_eq!(backend.sent(), vec![], "neither answered nor sent");
}
