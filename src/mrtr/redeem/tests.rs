//! Redemption, checked on a real bridge whose held calls run on a scripted backend
//! ([`FakeCall`]). The redemption order: each case of a table is a retry of a freshly held call,
//! with the result it must get, what it must leave behind (the held call still in the table,
//! for the refused-answers grace only, or taken) and what the backend must have heard. Retries
//! of other calls: while one retry's answers are validated, no lock that another retry needs is
//! held (a hook run from inside the validation looks), and a copy of the same retry waits for the
//! first one's verdict, then gets what it got behind the lock before.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Waker};
use std::time::Duration;

use dashmap::try_result::TryResult;
use futures_util::FutureExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::MrtrConfig;
use crate::metrics::Metrics;
use crate::mrtr::call::fake::{Backend, FakeCall};
use crate::mrtr::call::{CallDriver, Settle};
use crate::mrtr::clock::TokioClock;
use crate::mrtr::held;
use crate::mrtr::state::{random_id, KeyRing, StatePayload};
use crate::mrtr::Started;

type TestBridge = Bridge<FakeCall, TokioClock>;

const GRACE: Duration = Duration::from_secs(1);
const MAX_ROUNDS: u32 = 4;
/// The key the bridge gives the one question of a held call.
const KEY: &str = "elicitation-1";

fn bridge() -> Arc<TestBridge> {
    let config = MrtrConfig {
        held_ttl: Duration::from_secs(60),
        refused_retry_grace: GRACE,
        max_rounds: MAX_ROUNDS,
        // Room for the calls a test holds to find some in a given shard.
        max_held: 100_000,
        max_held_per_principal: 100_000,
        ..MrtrConfig::default()
    };
    Bridge::assemble(
        config,
        KeyRing::ephemeral(),
        "this-instance".into(),
        None,
        Arc::new(Metrics::new()),
        CancellationToken::new(),
    )
}

fn binding() -> CallBinding {
    CallBinding {
        route: "/mcp".into(),
        principal: "alice".into(),
        method: "tools/call".into(),
        params_digest: "digest-of-the-params".into(),
        error_context: json!({}),
    }
}

/// A call held for its first round: the backend asked one question (server request 1), a
/// name of at most 8 characters.
struct HeldRound {
    token: String,
    held_id: String,
    backend: Backend,
}

async fn hold_a_call(bridge: &Arc<TestBridge>) -> HeldRound {
    let (call, backend) = FakeCall::new(false);
    backend.ask(
        1,
        "elicitation/create",
        json!({
            "message": "Your name?",
            "requestedSchema": {
                "type": "object",
                "properties": { "name": { "type": "string", "maxLength": 8 } },
                "required": ["name"]
            }
        }),
    );
    let scope = RequestScope {
        client_capabilities: json!({ "elicitation": {} }),
        ..RequestScope::default()
    };
    // A round closes as soon as the question is in.
    let settle = Settle {
        window: Duration::ZERO,
        quiet: Duration::ZERO,
    };
    let driver = CallDriver::new(call, true, None, scope, Duration::from_secs(30), settle);
    let Started::Outcome(Outcome::InputRequired(result)) = bridge.start(driver, binding()).await
    else {
        panic!("the call was not held for input");
    };
    let token = result["requestState"].as_str().unwrap().to_owned();
    let held_id = bridge.key_ring().open(&token).unwrap().held_id;
    HeldRound {
        token,
        held_id,
        backend,
    }
}

fn answer(name: Value) -> Map<String, Value> {
    let mut answers = Map::new();
    answers.insert(
        KEY.into(),
        json!({ "action": "accept", "content": { "name": name } }),
    );
    answers
}

/// What the backend hears for an accepted name.
fn heard(name: &str) -> Value {
    json!({ "action": "accept", "content": { "name": name } })
}

async fn retry(
    bridge: &Arc<TestBridge>,
    binding: &CallBinding,
    token: &str,
    answers: &Map<String, Value>,
) -> Result<Redeemed, GatewayError> {
    bridge
        .redeem(binding, token, answers, RequestScope::default())
        .await
}

/// What a retry got.
#[derive(Debug, PartialEq)]
enum Verdict {
    Refused(StateRejection),
    InvalidAnswers,
    Fresh,
    Duplicate,
    Reissue,
    Again,
}

fn verdict(result: Result<Redeemed, GatewayError>) -> Verdict {
    match result {
        Ok(Redeemed::Fresh(_)) => Verdict::Fresh,
        Ok(Redeemed::Duplicate(_)) => Verdict::Duplicate,
        Ok(Redeemed::Reissue { .. }) => Verdict::Reissue,
        Ok(Redeemed::Again(_)) => Verdict::Again,
        Err(GatewayError::BadState { reason }) => Verdict::Refused(reason),
        Err(GatewayError::InvalidParams { .. }) => Verdict::InvalidAnswers,
        Err(other) => panic!("unexpected error: {other:?}"),
    }
}

/// What became of the held call.
#[derive(Debug, PartialEq)]
enum HeldAfter {
    /// Still held, its expiry untouched.
    Held,
    /// Still held, for `refused_retry_grace` at most.
    HeldForGrace,
    Taken,
}

fn held_after(bridge: &TestBridge, held_id: &str) -> HeldAfter {
    match bridge.held.update(held_id, |held| held.expires) {
        None => HeldAfter::Taken,
        Some(expires) if expires <= Instant::now() + GRACE => HeldAfter::HeldForGrace,
        Some(_) => HeldAfter::Held,
    }
}

/// The `requestState` a case sends.
enum State {
    AsIssued,
    /// One character of the sealed text changed.
    Tampered,
    /// The issued payload sealed with a key the bridge does not have.
    OtherKey,
    /// The issued payload, changed, sealed with the bridge's key (a state only a key holder
    /// could forge).
    Resealed(fn(&mut StatePayload)),
}

struct Case {
    name: &'static str,
    /// Answers of a retry redeemed first, with the state as issued.
    before: Option<Map<String, Value>>,
    state: State,
    request: fn(&mut CallBinding),
    answers: Map<String, Value>,
    expect: Verdict,
    held: HeldAfter,
    /// What the backend heard for its question, over both retries.
    backend_heard: Vec<Value>,
}

fn same_request(_: &mut CallBinding) {}

fn case(
    name: &'static str,
    state: State,
    request: fn(&mut CallBinding),
    answers: Map<String, Value>,
    expect: Verdict,
    held: HeldAfter,
    backend_heard: Vec<Value>,
) -> Case {
    Case {
        name,
        before: None,
        state,
        request,
        answers,
        expect,
        held,
        backend_heard,
    }
}

#[rustfmt::skip]
fn cases() -> Vec<Case> {
    let valid = || answer(json!("Al"));
    // Longer than the schema's `maxLength`.
    let invalid = || answer(json!("Bartholomew"));
    use HeldAfter::*;
    use StateRejection::*;
    use Verdict::*;
    vec![
        case("valid answers", State::AsIssued, same_request, valid(), Fresh, Taken, vec![heard("Al")]),
        case("no answer yet", State::AsIssued, same_request, Map::new(), Fresh, Taken, vec![]),
        case("tampered state", State::Tampered, same_request, valid(), Refused(Tampered), Held, vec![]),
        case("state sealed with another key", State::OtherKey, same_request, valid(), Refused(Tampered), Held, vec![]),
        case("expired state", State::Resealed(|p| p.expires_ms = now_ms() - 1), same_request, valid(), Refused(Expired), Held, vec![]),
        case("expired state, invalid answers", State::Resealed(|p| p.expires_ms = now_ms() - 1), same_request, invalid(), Refused(Expired), Held, vec![]),
        case("state of another owner", State::Resealed(|p| p.owner = "another-instance".into()), same_request, valid(), Refused(ConsumedOrUnknown), Held, vec![]),
        case("another principal", State::AsIssued, |b| b.principal = "mallory".into(), valid(), Refused(PrincipalMismatch), Held, vec![]),
        case("another principal, invalid answers", State::AsIssued, |b| b.principal = "mallory".into(), invalid(), Refused(PrincipalMismatch), Held, vec![]),
        case("another route", State::AsIssued, |b| b.route = "/other".into(), valid(), Refused(RequestMismatch), Held, vec![]),
        case("another method", State::AsIssued, |b| b.method = "prompts/get".into(), valid(), Refused(RequestMismatch), Held, vec![]),
        case("other params", State::AsIssued, |b| b.params_digest = "digest-of-other-params".into(), valid(), Refused(RequestMismatch), Held, vec![]),
        case("beyond the round limit", State::Resealed(|p| p.round = MAX_ROUNDS + 1), same_request, valid(), Refused(RoundLimit), Held, vec![]),
        case("another round", State::Resealed(|p| p.round += 1), same_request, valid(), Refused(ConsumedOrUnknown), Held, vec![]),
        case("another round, invalid answers", State::Resealed(|p| p.round += 1), same_request, invalid(), Refused(ConsumedOrUnknown), Held, vec![]),
        case("a call not held", State::Resealed(|p| p.held_id = random_id()), same_request, valid(), Refused(ConsumedOrUnknown), Held, vec![]),
        case("invalid answers", State::AsIssued, same_request, invalid(), InvalidAnswers, HeldForGrace, vec![]),
        case("an answer of the wrong type", State::AsIssued, same_request, answer(json!(7)), InvalidAnswers, HeldForGrace, vec![]),
        Case {
            before: Some(valid()),
            ..case("the same answers again", State::AsIssued, same_request, valid(), Duplicate, Taken, vec![heard("Al")])
        },
        Case {
            before: Some(valid()),
            ..case("other answers again", State::AsIssued, same_request, answer(json!("Bo")), Refused(ConsumedOrUnknown), Taken, vec![heard("Al")])
        },
        Case {
            before: Some(invalid()),
            ..case("valid answers after refused ones", State::AsIssued, same_request, valid(), Fresh, Taken, vec![heard("Al")])
        },
        Case {
            before: Some(invalid()),
            ..case("the same refused answers again", State::AsIssued, same_request, invalid(), InvalidAnswers, HeldForGrace, vec![])
        },
    ]
}

/// Design invariant 3 (and 4), case by case: the state is opened and verified first, then every
/// answer validated, and only then is the held call taken, once; a refused retry leaves it held
/// (for the grace only when its answers were refused) and the backend hears nothing; a re-sent
/// retry with the same answers attaches to the first one's outcome.
#[tokio::test]
async fn redemption_checks_the_state_then_the_answers_then_takes_the_call_once() {
    for case in cases() {
        let bridge = bridge();
        let round = hold_a_call(&bridge).await;
        // Kept until the case is checked: the resumed call must not be cancelled meanwhile.
        let mut first = None;
        if let Some(answers) = &case.before {
            first = Some(retry(&bridge, &binding(), &round.token, answers).await);
        }
        let token = match case.state {
            State::AsIssued => round.token.clone(),
            State::Tampered => {
                let mut chars: Vec<char> = round.token.chars().collect();
                let middle = chars.len() / 2;
                chars[middle] = if chars[middle] == 'A' { 'B' } else { 'A' };
                chars.into_iter().collect()
            }
            State::OtherKey => {
                KeyRing::ephemeral().seal(&bridge.key_ring().open(&round.token).unwrap())
            }
            State::Resealed(change) => {
                let mut payload = bridge.key_ring().open(&round.token).unwrap();
                change(&mut payload);
                bridge.key_ring().seal(&payload)
            }
        };
        let mut request = binding();
        (case.request)(&mut request);
        let got = verdict(retry(&bridge, &request, &token, &case.answers).await);
        assert_eq!(got, case.expect, "{}: result", case.name);
        assert_eq!(
            held_after(&bridge, &round.held_id),
            case.held,
            "{}: the held call",
            case.name
        );
        let backend_heard: Vec<Value> = round
            .backend
            .responses_to(1)
            .into_iter()
            .map(|outcome| outcome.unwrap())
            .collect();
        assert_eq!(
            backend_heard, case.backend_heard,
            "{}: what the backend heard",
            case.name
        );
        drop(first);
    }
}

thread_local! {
    /// Runs once, from inside the next answer validation on this thread.
    static DURING_VALIDATION: Cell<Option<Box<dyn FnOnce()>>> = const { Cell::new(None) };
}

/// Called by the redemption while it validates a retry's answers.
pub(super) fn while_validating() {
    if let Some(hook) = DURING_VALIDATION.take() {
        hook();
    }
}

/// Shards a map has by default (dashmap's rule), to bound the search for calls that share one.
fn default_shards() -> usize {
    (std::thread::available_parallelism().map_or(1, usize::from) * 4).next_power_of_two()
}

/// A slow (large) answer validation used to hold the redemption table's shard, and the held
/// table's, so retries of other calls in those shards waited for it, their runtime thread
/// blocked. From inside the validation: both shards are free, and a retry of a call in each
/// one completes without waiting.
#[tokio::test]
async fn a_retry_being_validated_holds_no_lock_another_retry_needs() {
    let bridge = bridge();
    let first = hold_a_call(&bridge).await;
    let mut same_redemption_shard = None;
    let mut same_held_shard = None;
    for _ in 0..32 * default_shards() {
        if same_redemption_shard.is_some() && same_held_shard.is_some() {
            break;
        }
        let other = hold_a_call(&bridge).await;
        if same_redemption_shard.is_none()
            && held::share_a_shard(&bridge.redemptions, &first.held_id, &other.held_id)
        {
            same_redemption_shard = Some(other);
        } else if same_held_shard.is_none()
            && bridge.held.share_a_shard(&first.held_id, &other.held_id)
        {
            same_held_shard = Some(other);
        }
    }
    let neighbours = [
        same_redemption_shard.expect("a call in the first one's redemption shard"),
        same_held_shard.expect("a call in the first one's held-table shard"),
    ];

    let hook = {
        let bridge = bridge.clone();
        let held_id = first.held_id.clone();
        let tokens: Vec<String> = neighbours.iter().map(|n| n.token.clone()).collect();
        move || {
            assert!(
                !matches!(bridge.redemptions.try_get(&held_id), TryResult::Locked),
                "the redemption table's shard is locked while answers are validated"
            );
            assert!(
                !bridge.held.shard_is_locked(&held_id),
                "the held table's shard is locked while answers are validated"
            );
            for token in &tokens {
                let got = retry(&bridge, &binding(), token, &answer(json!("Bo"))).now_or_never();
                assert!(
                    matches!(got, Some(Ok(Redeemed::Fresh(_)))),
                    "a retry of another call did not complete while answers were validated"
                );
            }
        }
    };
    DURING_VALIDATION.set(Some(Box::new(hook)));
    let got = verdict(retry(&bridge, &binding(), &first.token, &answer(json!("Al"))).await);
    assert!(
        DURING_VALIDATION.take().is_none(),
        "the hook ran inside the validation"
    );
    assert_eq!(got, Verdict::Fresh);
    assert_eq!(first.backend.responses_to(1), vec![Ok(heard("Al"))]);
    for neighbour in &neighbours {
        assert_eq!(neighbour.backend.responses_to(1), vec![Ok(heard("Bo"))]);
    }
}

type PendingRetry = Pin<Box<dyn Future<Output = Result<Redeemed, GatewayError>>>>;

/// Two copies of a retry at once, the second arriving while the first one's answers are
/// validated.
struct Race {
    name: &'static str,
    first: Map<String, Value>,
    copy: Map<String, Value>,
    first_gets: Verdict,
    copy_gets: Verdict,
    held: HeldAfter,
    backend_heard: Vec<Value>,
}

#[rustfmt::skip]
fn races() -> Vec<Race> {
    let valid = || answer(json!("Al"));
    let invalid = || answer(json!("Bartholomew"));
    let race = |name, first, copy, first_gets, copy_gets, held, backend_heard| Race {
        name, first, copy, first_gets, copy_gets, held, backend_heard,
    };
    use HeldAfter::*;
    use Verdict::*;
    vec![
        race("the same answers", valid(), valid(), Fresh, Duplicate, Taken, vec![heard("Al")]),
        race("other answers", valid(), answer(json!("Bo")), Fresh, Refused(StateRejection::ConsumedOrUnknown), Taken, vec![heard("Al")]),
        race("valid answers behind refused ones", invalid(), valid(), InvalidAnswers, Fresh, Taken, vec![heard("Al")]),
        race("the same refused answers", invalid(), invalid(), InvalidAnswers, InvalidAnswers, HeldForGrace, vec![]),
    ]
}

/// Single use and replay hold without a lock: a copy of a retry that arrives while the first
/// one's answers are validated waits for its verdict (it cannot redeem the call meanwhile), then
/// attaches to the first one's outcome, is refused, or is checked in its turn.
#[tokio::test]
async fn a_copy_arriving_while_a_retry_is_validated_waits_for_its_verdict() {
    for race in races() {
        let bridge = bridge();
        let round = hold_a_call(&bridge).await;
        let waiting: Rc<RefCell<Option<PendingRetry>>> = Rc::default();
        let hook = {
            let bridge = bridge.clone();
            let token = round.token.clone();
            let answers = race.copy.clone();
            let waiting = waiting.clone();
            move || {
                let mut copy: PendingRetry =
                    Box::pin(async move { retry(&bridge, &binding(), &token, &answers).await });
                let polled = copy.as_mut().poll(&mut Context::from_waker(Waker::noop()));
                assert!(
                    polled.is_pending(),
                    "a copy of the retry did not wait for the first one's verdict"
                );
                *waiting.borrow_mut() = Some(copy);
            }
        };
        DURING_VALIDATION.set(Some(Box::new(hook)));
        let first = verdict(retry(&bridge, &binding(), &round.token, &race.first).await);
        let copy = waiting
            .borrow_mut()
            .take()
            .expect("the hook ran inside the validation");
        let copy = tokio::time::timeout(Duration::from_secs(10), copy)
            .await
            .expect("the first one's verdict woke the copy");
        let copy = verdict(copy);
        assert_eq!(first, race.first_gets, "{}: the first retry", race.name);
        assert_eq!(copy, race.copy_gets, "{}: its copy", race.name);
        assert_eq!(
            held_after(&bridge, &round.held_id),
            race.held,
            "{}: the held call",
            race.name
        );
        let backend_heard: Vec<Value> = round
            .backend
            .responses_to(1)
            .into_iter()
            .map(|outcome| outcome.unwrap())
            .collect();
        assert_eq!(
            backend_heard, race.backend_heard,
            "{}: what the backend heard",
            race.name
        );
    }
}
