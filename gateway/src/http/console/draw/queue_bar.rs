//! A series' queue as a bar of the GPUs its jobs ask for, in the order the dispatcher
//! will decide them. The viewer's own jobs are drawn one by one (named, linked); the
//! other teams' are merged into runs that say only how many jobs and GPUs they are —
//! a member never sees another team's job, and an admin sees runs per team. A long
//! queue stays a handful of shapes.

use maud::{Markup, html};

use super::{along, num};
use crate::http::console::present;

/// One queued job, in queue order.
#[derive(Debug, Clone)]
pub struct Queued<'a> {
    pub id: &'a str,
    pub team: &'a str,
    pub gpus: u32,
    /// The job's name when the viewer may see it (its own team's, or an admin).
    pub name: Option<&'a str>,
    /// Where it stands against other teams, in words (fair share), if known.
    pub standing: Option<String>,
}

/// What the bar draws: a job of the viewer, or a run of others'.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Block {
    Own {
        id: String,
        name: String,
        gpus: u32,
        standing: Option<String>,
    },
    Others {
        team: Option<String>,
        jobs: u32,
        gpus: u32,
    },
    /// Everything after the first [`MAX_BLOCKS`] blocks, in one.
    Rest { jobs: u32, gpus: u32 },
}

/// Blocks drawn before the rest of the queue is drawn as one (fair share interleaves
/// teams, so a long queue would otherwise be one run per job).
const MAX_BLOCKS: usize = 60;

/// At most this many of the viewer's jobs are drawn apart; the rest join runs.
pub const OWN_DRAWN: usize = 40;

/// Merges `queue` into blocks; `viewer_team`: the viewer's team; `admin`: runs name
/// their team.
fn blocks(queue: &[Queued<'_>], viewer_team: &str, admin: bool) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    let mut own = 0;
    for q in queue {
        if out.len() >= MAX_BLOCKS {
            match out.last_mut() {
                Some(Block::Rest { jobs, gpus }) => {
                    *jobs += 1;
                    *gpus += q.gpus;
                }
                _ => out.push(Block::Rest {
                    jobs: 1,
                    gpus: q.gpus,
                }),
            }
            continue;
        }
        if q.team == viewer_team && own < OWN_DRAWN {
            own += 1;
            out.push(Block::Own {
                id: q.id.to_string(),
                name: q.name.unwrap_or(q.id).to_string(),
                gpus: q.gpus,
                standing: q.standing.clone(),
            });
            continue;
        }
        let team = (admin || q.team == viewer_team).then(|| q.team.to_string());
        match out.last_mut() {
            Some(Block::Others {
                team: t,
                jobs,
                gpus,
            }) if *t == team => {
                *jobs += 1;
                *gpus += q.gpus;
            }
            _ => out.push(Block::Others {
                team,
                jobs: 1,
                gpus: q.gpus,
            }),
        }
    }
    out
}

/// The queue bar of one series.
pub fn series(series: &str, queue: &[Queued<'_>], viewer_team: &str, admin: bool) -> Markup {
    let blocks = blocks(queue, viewer_team, admin);
    let total: u32 = queue.iter().map(|q| q.gpus).sum();
    let own: u32 = queue
        .iter()
        .filter(|q| q.team == viewer_team)
        .map(|q| q.gpus)
        .sum();
    let scale = f64::from(total.max(1));
    let mut x = 0.0;
    html! {
        figure.bar.queue data-series=(series) data-jobs=(queue.len()) data-gpus=(total) data-own-gpus=(own) {
            svg viewBox="0 0 1000 28" preserveAspectRatio="none" role="img"
                aria-label={ (series) ": " (queue.len()) " jobs queued asking for " (total) " GPUs, " (own) " of them your team's" } {
                @for b in &blocks {
                    @let (class, gpus, title) = match b {
                        Block::Own { name, gpus, standing, .. } => ("own", *gpus, match standing {
                            Some(s) => format!("{name}: {gpus} GPUs. {s}"),
                            None => format!("{name}: {gpus} GPUs"),
                        }),
                        Block::Others { team: Some(t), jobs, gpus } => ("others", *gpus, format!("{t}: {}, {}", present::count(*jobs, "job"), present::count(*gpus, "GPU"))),
                        Block::Others { team: None, jobs, gpus } => ("others", *gpus, format!("other teams: {}, {}", present::count(*jobs, "job"), present::count(*gpus, "GPU"))),
                        Block::Rest { jobs, gpus } => ("rest", *gpus, format!("the rest of the queue: {}, {}", present::count(*jobs, "job"), present::count(*gpus, "GPU"))),
                    };
                    @let w = along(f64::from(gpus), scale);
                    @if let Block::Own { id, .. } = b {
                        a href={ "/console/jobs/" (id) } {
                            rect class=(class) data-job=(id) data-value=(gpus) x=(num(x)) y="0" width=(num(w)) height="28" { title { (title) } }
                        }
                    } @else {
                        rect class=(class) data-value=(gpus) x=(num(x)) y="0" width=(num(w)) height="28" { title { (title) } }
                    }
                    ({ x += w; "" })
                }
            }
            figcaption {
                strong { (series) } " · " (present::count(queue.len() as u64, "job")) @if queue.len() == 1 { " asks for " } @else { " ask for " } (present::count(total, "GPU")) " · "
                span.key.own {} "your team's " (own) " · " span.key.others {} "others' " (total - own)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q<'a>(id: &'a str, team: &'a str, gpus: u32) -> Queued<'a> {
        Queued {
            id,
            team,
            gpus,
            name: None,
            standing: None,
        }
    }

    #[test]
    fn a_member_sees_its_jobs_and_only_runs_of_others() {
        let queue = [
            q("a1", "a", 8),
            q("b1", "b", 8),
            q("c1", "c", 4),
            q("a2", "a", 2),
            q("b2", "b", 1),
        ];
        let drawn = blocks(&queue, "a", false);
        assert_eq!(
            drawn,
            vec![
                Block::Own {
                    id: "a1".into(),
                    name: "a1".into(),
                    gpus: 8,
                    standing: None,
                },
                Block::Others {
                    team: None,
                    jobs: 2,
                    gpus: 12
                },
                Block::Own {
                    id: "a2".into(),
                    name: "a2".into(),
                    gpus: 2,
                    standing: None,
                },
                Block::Others {
                    team: None,
                    jobs: 1,
                    gpus: 1
                },
            ]
        );
        let html = series("h100", &queue, "a", false).into_string();
        for other in ["b1", "c1", "b2", ">b<", ">c<"] {
            assert!(!html.contains(other), "{other} leaked: {html}");
        }
        assert!(
            html.contains(r#"data-gpus="23""#) && html.contains(r#"data-own-gpus="10""#),
            "{html}"
        );
    }

    #[test]
    fn a_long_interleaved_queue_stays_a_handful_of_shapes() {
        let ids: Vec<String> = (0..10_000).map(|i| format!("j{i}")).collect();
        let teams = ["a", "b", "c"];
        let queue: Vec<Queued<'_>> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| q(id, teams[i % 3], 1))
            .collect();
        let drawn = blocks(&queue, "a", true);
        assert_eq!(drawn.len(), MAX_BLOCKS + 1);
        assert_eq!(
            drawn.last(),
            Some(&Block::Rest {
                jobs: 10_000 - 60,
                gpus: 10_000 - 60
            })
        );
        let html = series("h100", &queue, "a", true).into_string();
        assert!(html.len() < 20_000, "{} bytes", html.len());
    }

    #[test]
    fn the_viewers_jobs_say_where_they_stand() {
        let mut own = q("a1", "a", 8);
        own.name = Some("train-llama");
        own.standing = Some("Team a is below its fair share.".into());
        let html = series("h100", &[q("b1", "b", 8), own], "a", false).into_string();
        assert!(
            html.contains("<title>train-llama: 8 GPUs. Team a is below its fair share.</title>"),
            "{html}"
        );
    }

    #[test]
    fn an_admin_sees_runs_per_team() {
        let queue = [q("b1", "b", 8), q("b2", "b", 8), q("c1", "c", 4)];
        assert_eq!(
            blocks(&queue, "a", true),
            vec![
                Block::Others {
                    team: Some("b".into()),
                    jobs: 2,
                    gpus: 16
                },
                Block::Others {
                    team: Some("c".into()),
                    jobs: 1,
                    gpus: 4
                },
            ]
        );
    }
}
